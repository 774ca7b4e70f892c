package frontend

import "context"

// afterTasks bounds the tasks that follow applied doc changes (stopping
// the worker of a deleted doc's job, removing a doc's legacy state
// fields) that run at once: deleting a thousand docs does not start a
// thousand stops of workers at once.
const afterTasks = 16

// goAfter runs fn, after the doc changes that call for it are applied,
// within afterTasks at once, with a context that Close ends; Close waits
// for it.
func (f *Frontend) goAfter(fn func(ctx context.Context)) {
	f.afterWG.Add(1)
	go func() {
		defer f.afterWG.Done()
		select {
		case f.after <- struct{}{}:
		case <-f.afterCtx.Done():
			return
		}
		defer func() { <-f.after }()
		// A slot freed by Close's cancel makes both cases above ready and
		// select picks at random: a task that won a slot after Close began
		// is dropped too.
		if f.afterCtx.Err() != nil {
			return
		}
		fn(f.afterCtx)
	}()
}

// Close ends the frontend's work in the background and waits for it: the
// tasks still waiting are dropped (a worker not stopped stops at its next
// renewal, when the queue tells it its job is gone; legacy fields are
// removed when the doc is next seen).
func (f *Frontend) Close() {
	f.afterCancel()
	f.afterWG.Wait()
}
