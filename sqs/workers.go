package sqs

import "sync"

// workers runs jobs on long-lived goroutines, started as they are needed
// and ended by close. A goroutine that has grown its stack through the
// SDK's middleware keeps it for the next request, where a goroutine a
// request would grow it, copied frame by frame, every time.
type workers[T any] struct {
	jobs    chan T // never holds more than its capacity, the most that run
	started int
	done    sync.WaitGroup
}

func newWorkers[T any](most int) *workers[T] { return &workers[T]{jobs: make(chan T, most)} }

// add hands j to a worker, starting one with go spawn() (whose goroutine
// calls serve) when fewer than busy, the jobs asked for and not finished
// with j counted, have been started. The caller serializes add and close
// under its own lock and keeps busy at most the capacity, so add never
// blocks.
func (w *workers[T]) add(j T, busy int, spawn func()) {
	if w.started < busy {
		w.started++
		w.done.Add(1)
		go spawn()
	}
	w.jobs <- j
}

// serve runs fn on every job until close; the goroutine spawn started
// calls it.
func (w *workers[T]) serve(fn func(T)) {
	defer w.done.Done()
	for j := range w.jobs {
		fn(j)
	}
}

// close ends the workers once they have run the jobs already added; no add
// may follow.
func (w *workers[T]) close() { close(w.jobs) }

// wait returns once every worker has ended (after close).
func (w *workers[T]) wait() { w.done.Wait() }
