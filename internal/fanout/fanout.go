// Package fanout runs one function over many indexes on a few goroutines:
// the readers of sysfs that wait in the kernel more than they compute
// (loop devices, filesystem error counters) use it.
package fanout

import "sync"

// Each calls do(i) once for every i in [0, n), on at most workers
// goroutines at once, and returns when every call has. do writes its
// result to a slot of its own (out[i]); Each orders nothing.
func Each(n, workers int, do func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				do(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
