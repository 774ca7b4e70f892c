package jobserver

import (
	"sync"

	"github.com/couchepi/couchepi/plugin/replicate"
)

// maxResumes bounds the parked jobs whose resume hints a server keeps
// (about 300 bytes each).
const maxResumes = 100_000

// resumes holds, for the jobs this server parked, what their next run can
// start from (replicate.Resume): a woken job starts with one request
// instead of four. A hint is taken once, by the next run of the job on
// this server, and used only when the job's record still shows the
// checkpoint it was left at (no other node ran it since); the run checks
// it against the source's checkpoint too.
type resumes struct {
	mu sync.Mutex
	m  map[string]*replicate.Resume
}

// put keeps h for job id.
func (r *resumes) put(id string, h *replicate.Resume) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*replicate.Resume{}
	}
	if _, ok := r.m[id]; !ok && len(r.m) >= maxResumes {
		for k := range r.m { // any one: a dropped hint costs a full start
			delete(r.m, k)
			break
		}
	}
	r.m[id] = h
}

// take removes and returns job id's hint if it was left at checkpointed
// (the record's checkpointed source seq), else nil.
func (r *resumes) take(id string, checkpointed []byte) *replicate.Resume {
	r.mu.Lock()
	h := r.m[id]
	delete(r.m, id)
	r.mu.Unlock()
	if h == nil || !h.At(checkpointed) {
		return nil
	}
	return h
}
