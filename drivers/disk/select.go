package disk

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"

	"github.com/volumed/volumed/internal/size"
)

// costLimit bounds one evaluation (comprehensions over partitions are
// the only loops a selector has); far above any sensible selector.
const costLimit = 100000

// CompileError is one problem in an expression, at a 1-based line and
// column of the expression's text, so a manifest check can add where the
// expression starts in its file.
type CompileError struct {
	Line, Column int
	Msg          string
}

// CompileErrors are an expression's problems.
type CompileErrors []CompileError

func (e CompileErrors) Error() string {
	parts := make([]string, len(e))
	for i, c := range e {
		parts[i] = fmt.Sprintf("%d:%d: %s", c.Line, c.Column, c.Msg)
	}
	return strings.Join(parts, "; ")
}

// Selector is a compiled disk expression.
type Selector struct {
	prg cel.Program
	// parts are the operands of a top-level &&, each compiled on its
	// own, to say which one a disk fails.
	parts []part
}

type part struct {
	text string
	prg  cel.Program
}

func newEnv() (*cel.Env, error) {
	opts := []cel.EnvOption{
		ext.NativeTypes(reflect.TypeOf(Facts{}), reflect.TypeOf(Partition{}), ext.ParseStructTag("json")),
		cel.Variable("disk", cel.ObjectType("disk.Facts")),
		ext.Strings(),
	}
	// Size units for expressions: disk.size >= 100 * GiB.
	for name, v := range size.Constants() {
		opts = append(opts, cel.Constant(name, cel.IntType, types.Int(v)))
	}
	return cel.NewEnv(opts...)
}

// Compile checks expr, a CEL expression over `disk` (see Facts for its
// fields; KiB, MiB, GiB, TiB and PiB are defined) that must be a bool. Errors
// are CompileErrors.
func Compile(expr string) (*Selector, error) {
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("disk selector environment: %w", err)
	}
	a, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		var errs CompileErrors
		for _, e := range iss.Errors() {
			errs = append(errs, CompileError{Line: e.Location.Line(), Column: e.Location.Column() + 1, Msg: e.Message})
		}
		return nil, errs
	}
	if !a.OutputType().IsExactType(cel.BoolType) {
		return nil, CompileErrors{{Line: 1, Column: 1, Msg: fmt.Sprintf("the expression is a %s; a disk selector must be true or false", a.OutputType())}}
	}
	s := &Selector{}
	if s.prg, err = env.Program(a, cel.CostLimit(costLimit)); err != nil {
		return nil, err
	}
	for _, e := range conjuncts(a.NativeRep().Expr()) {
		text, err := cel.ExprToString(e, a.NativeRep().SourceInfo())
		if err != nil {
			continue
		}
		pa, iss := env.Compile(text)
		if iss != nil && iss.Err() != nil {
			continue
		}
		prg, err := env.Program(pa, cel.CostLimit(costLimit))
		if err != nil {
			continue
		}
		s.parts = append(s.parts, part{text: text, prg: prg})
	}
	return s, nil
}

func conjuncts(e ast.Expr) []ast.Expr {
	if e.Kind() == ast.CallKind && e.AsCall().FunctionName() == "_&&_" {
		var out []ast.Expr
		for _, a := range e.AsCall().Args() {
			out = append(out, conjuncts(a)...)
		}
		return out
	}
	return []ast.Expr{e}
}

// Match evaluates the selector on d. When it is false, why names the
// parts of a top-level && that are false; an error (a field of a
// partition that is not there, a cost too high) never matches.
func (s *Selector) Match(d Facts) (ok bool, why string, err error) {
	ok, err = eval(s.prg, d)
	if err != nil {
		return false, "", err
	}
	if ok {
		return true, "", nil
	}
	var failed []string
	for _, p := range s.parts {
		if v, err := eval(p.prg, d); err != nil || !v {
			failed = append(failed, p.text+showFields(p.text, d))
		}
	}
	if len(failed) == 0 || len(s.parts) < 2 {
		return false, "the expression is false", nil
	}
	return false, "false: " + strings.Join(failed, ", "), nil
}

var fieldRef = regexp.MustCompile(`\bdisk\.([A-Za-z]+)\b`)

// showFields renders the values of the disk's fields text refers to,
// e.g. ` (disk.size is 1073741824)`.
func showFields(text string, d Facts) string {
	v := reflect.ValueOf(d)
	var shown []string
	for _, m := range fieldRef.FindAllStringSubmatch(text, -1) {
		for i := 0; i < v.NumField(); i++ {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			s := fmt.Sprintf("disk.%s is %#v", name, v.Field(i).Interface())
			if name == m[1] && v.Field(i).Kind() != reflect.Slice && !slices.Contains(shown, s) {
				shown = append(shown, s)
			}
		}
	}
	if len(shown) == 0 {
		return ""
	}
	return " (" + strings.Join(shown, ", ") + ")"
}

func eval(prg cel.Program, d Facts) (bool, error) {
	out, _, err := prg.Eval(map[string]any{"disk": d})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the expression gave %v, not true or false", out)
	}
	return b, nil
}

// Verdict is the selector's answer for one disk.
type Verdict struct {
	Disk  Facts  `json:"disk"`
	Match bool   `json:"match"`
	Why   string `json:"why,omitempty"` // why not, when it does not match
}

// Selection is the selector's answer over all disks.
type Selection struct {
	Chosen   *Facts    `json:"chosen"` // nil when no disk matches
	Why      string    `json:"why"`
	Verdicts []Verdict `json:"verdicts"` // every disk, in path order
}

// Select picks the disk s selects among disks: the only match, or the
// first match in path order when several do (Why says which and that
// they are several), or none (Why lists every disk and why it failed).
func (s *Selector) Select(disks []Facts) Selection {
	var sel Selection
	var matched []string
	for _, d := range sortedByPath(disks) {
		ok, why, err := s.Match(d)
		if err != nil {
			why = "error: " + err.Error()
		}
		sel.Verdicts = append(sel.Verdicts, Verdict{Disk: d, Match: ok, Why: why})
		if ok {
			matched = append(matched, d.Path)
			if sel.Chosen == nil {
				c := d
				sel.Chosen = &c
			}
		}
	}
	switch len(matched) {
	case 0:
		var lines []string
		for _, v := range sel.Verdicts {
			lines = append(lines, fmt.Sprintf("%s: %s", v.Disk.Path, v.Why))
		}
		if len(lines) == 0 {
			sel.Why = "no disk matches: the host has no disks"
		} else {
			sel.Why = "no disk matches (" + strings.Join(lines, "; ") + ")"
		}
	case 1:
		sel.Why = sel.Chosen.Path + " is the only disk that matches"
	default:
		sel.Why = fmt.Sprintf("%d disks match (%s); %s is the first by path", len(matched), strings.Join(matched, ", "), sel.Chosen.Path)
	}
	return sel
}

func sortedByPath(disks []Facts) []Facts {
	out := slices.Clone(disks)
	slices.SortStableFunc(out, func(a, b Facts) int { return Compare(a.Path, b.Path) })
	return out
}
