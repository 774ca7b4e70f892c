package replicate

import "sync"

// Runs that follow one source together (a fan-out) read it in rounds on
// its change signal, not on a continuous feed each. With a feed each, the
// source streams every change once per run (the thousand feeds of a
// 1 → 1,000 fan-out: a thousand copies of each row, and four _changes
// requests per write as runs reopened them); in rounds, the runs
// signalled by one write take the change from one read (shared.go). A run
// alone on its source keeps its feed, whose rows arrive without the
// signal's detour, until a second one follows the source.

// followers counts a Group's gated continuous readers by sharedKey.
type followers struct {
	mu sync.Mutex
	m  map[string]*following
}

// following is the count of one source's readers; company is closed
// while there are more than one.
type following struct {
	n       int
	company chan struct{}
}

// follow counts a reader of key until the returned func is called.
func (f *followers) follow(key string) (unfollow func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]*following{}
	}
	e := f.m[key]
	if e == nil {
		e = &following{company: make(chan struct{})}
		f.m[key] = e
	}
	if e.n++; e.n == 2 {
		close(e.company)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			switch e.n--; e.n {
			case 0:
				delete(f.m, key)
			case 1:
				e.company = make(chan struct{})
			}
		})
	}
}

// company returns a channel closed while more than one reader follows
// key (nil when none does).
func (f *followers) company(key string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.m[key]; e != nil {
		return e.company
	}
	return nil
}

// shared reports whether more than one reader follows key.
func (f *followers) shared(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.m[key]
	return e != nil && e.n > 1
}
