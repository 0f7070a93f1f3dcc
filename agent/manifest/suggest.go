// Did-you-mean suggestions for unknown fields.

package manifest

import (
	"fmt"
	"strings"
)

func unknownField(key string, fields map[string]int) string {
	best, bestD := "", 3
	for name := range fields {
		if strings.EqualFold(name, key) {
			best = name
			break
		}
		dist := editDistance(key, name)
		limit := 1
		if len(name) > 4 {
			limit = 2
		}
		if dist <= limit && (dist < bestD || dist == bestD && name < best) {
			best, bestD = name, dist
		}
	}
	if best == "" {
		return "unknown field"
	}
	return fmt.Sprintf("unknown field (did you mean %q?)", best)
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
