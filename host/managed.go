package host

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/repeatlog"
	"github.com/hashicorp/go-hclog"
)

// drainGrace is how long a swap or close waits for an event delivery in
// flight before cancelling it.
const drainGrace = 10 * time.Second

// managed is one loaded plugin across its processes: restarts and version
// swaps replace the instance, the event queue stays.
type managed struct {
	h    *Host
	name string
	log  hclog.Logger

	mu    sync.Mutex // guards spec, info, state, cancelDelivery, deliveryFailures
	spec  Spec
	info  hooks.PluginInfo
	state State
	// cancelDelivery cancels the Deliver or CatchUp call in flight, if any.
	cancelDelivery func()
	// deliveryFailures keeps failed deliveries and catch-ups to a log
	// line per interval.
	deliveryFailures repeatlog.Failures

	// cur answers sync hooks and routes; nil while the plugin is down.
	// Change it only through setCur/swapCur/casCur, which wake waiters.
	cur atomic.Pointer[instance]
	// curChange is closed (and replaced) whenever cur changes.
	curChange atomic.Pointer[chan struct{}]

	// lifeMu serialises lifecycle changes: restart, reload, close.
	lifeMu sync.Mutex
	// deliverMu is held by the delivery loop during an RPC and by reload
	// between stopping the old process and starting the new one.
	deliverMu sync.Mutex

	q  *eventQueue
	mx *pluginMetrics // set once the name is known, before hooks reach it
	// Counters read at scrape time by hostCollector.
	delivered, catchUps, restarts, reloadsOK, reloadsFailed atomic.Uint64

	wake   chan struct{}
	stop   chan struct{}
	closed bool // under lifeMu
	// goroutines counts monitor, deliverLoop and restartLoop; close waits
	// for them. Start them only through goLocked.
	goroutines sync.WaitGroup
}

// goLocked runs fn on a goroutine close waits for, unless the plugin is
// closed. The caller holds lifeMu, so the Add cannot race close's Wait
// (which starts after close has set closed under lifeMu).
func (m *managed) goLocked(fn func()) {
	if m.closed {
		return
	}
	m.goroutines.Add(1)
	go func() {
		defer m.goroutines.Done()
		fn()
	}()
}

func newManaged(h *Host, spec Spec) *managed {
	return &managed{h: h, spec: spec, name: spec.Path, log: h.log, state: StateStarting,
		q: newEventQueue(h.cfg.QueueSize), wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (m *managed) setState(s State) {
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
}

func (m *managed) status() PluginStatus {
	m.mu.Lock()
	st := PluginStatus{Name: m.name, Version: m.info.Version, Path: m.spec.Path, State: m.state}
	m.mu.Unlock()
	if inst := m.cur.Load(); inst != nil {
		st.PID, st.SHA256, st.Path, st.Version = inst.pid, inst.sum, inst.path, inst.info.Version
	}
	return st
}

// notify wakes the delivery loop without blocking.
func (m *managed) notify() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// monitor watches one instance: process exit, failed health checks and
// transport errors reported by callers lead to a restart.
func (m *managed) monitor(inst *instance) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	failures := 0
	for {
		select {
		case <-inst.retired:
			return
		case <-inst.exited:
			m.onDeath(inst, "plugin process exited")
			return
		case <-tick.C:
		case <-inst.suspect:
		}
		// Under the instance's life: retiring it ends a check in flight,
		// so Close does not wait out its 5 s.
		ctx, cancel := context.WithTimeout(inst.streamCtx, 5*time.Second)
		_, err := inst.rpc.Health(ctx, &pb.Empty{})
		cancel()
		select {
		case <-inst.retired:
			return
		case <-inst.exited:
			m.onDeath(inst, "plugin process exited")
			return
		default:
		}
		if err == nil {
			failures = 0
			continue
		}
		failures++
		m.log.Warn("plugin health check failed", "pid", inst.pid, "failures", failures, "error", err)
		if failures >= 3 {
			m.onDeath(inst, "plugin failed 3 health checks")
			return
		}
	}
}

// onDeath takes a dead instance out of service and starts restarting. It
// runs on inst's monitor, so close waits for the kill too; the kill runs
// after lifeMu is released (deferred first, it runs last), so a
// lifecycle change does not wait for it.
func (m *managed) onDeath(inst *instance, why string) {
	defer inst.kill()
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed || !m.casCur(inst, nil) {
		return
	}
	m.q.setDown(true)
	m.setState(StateRestarting)
	m.log.Error("plugin is down; restarting", "reason", why, "pid", inst.pid)
	m.goLocked(m.restartLoop)
}

// restartLoop starts a new process with exponential backoff (100ms → 30s)
// until one runs or the plugin is closed or replaced by a reload.
func (m *managed) restartLoop() {
	backoff := 100 * time.Millisecond
	failures := 0
	for {
		select {
		case <-m.stop:
			return
		case <-time.After(backoff):
		}
		if done, err := m.restartOnce(); done {
			return
		} else if err != nil {
			failures++
			m.log.Error("plugin restart failed", "attempt", failures, "next_in", (backoff * 2).String(), "error", err)
			if failures >= 5 {
				m.setState(StateFailed)
			}
		}
		backoff *= 2
		if backoff > 30*time.Second {
			backoff = 30 * time.Second
		}
	}
}

func (m *managed) restartOnce() (done bool, err error) {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed || m.cur.Load() != nil {
		return true, nil
	}
	m.mu.Lock()
	spec := m.spec
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := m.h.launch(ctx, m, spec)
	if err != nil {
		return false, err
	}
	if inst.info.Name != m.name {
		inst.kill()
		return false, fmt.Errorf("binary %s now calls itself %q, not %q", spec.Path, inst.info.Name, m.name)
	}
	m.setCur(inst)
	m.mu.Lock()
	m.info = inst.info
	m.mu.Unlock()
	m.h.rebuild()
	if err := m.h.startInstance(ctx, inst); err != nil {
		m.setCur(nil)
		inst.kill()
		return false, err
	}
	m.q.setDown(false)
	m.setState(StateRunning)
	m.goLocked(func() { m.monitor(inst) })
	m.notify()
	m.restarts.Add(1)
	m.log.Info("plugin restarted", "pid", inst.pid, "version", inst.info.Version)
	return true, nil
}

// reload swaps the plugin to spec; see Host.Reload.
func (m *managed) reload(ctx context.Context, spec Spec) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed {
		return fmt.Errorf("plugin %s is closed", m.name)
	}
	m.mu.Lock()
	if spec == (Spec{}) {
		spec = m.spec
	}
	prevState := m.state
	m.state = StateReloading
	m.mu.Unlock()
	next, err := m.h.launch(ctx, m, spec)
	if err != nil {
		m.reloadsFailed.Add(1)
		m.setState(prevState)
		return err
	}
	if next.info.Name != m.name {
		next.kill()
		m.reloadsFailed.Add(1)
		m.setState(prevState)
		return fmt.Errorf("cannot reload plugin %s with %s: it is plugin %q", m.name, spec.Path, next.info.Name)
	}
	// From here the new process answers sync hooks and routes.
	old := m.swapCur(next)
	m.mu.Lock()
	m.spec = spec
	m.info = next.info
	m.mu.Unlock()
	m.h.rebuild()

	// Drain the old process: no event delivery is in flight while we hold
	// deliverMu; Stop lets it finish in-flight calls, checkpoint and release
	// its files before the new one is started.
	m.drained(drainGrace, func() {
		if old != nil {
			old.retire()
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := old.rpc.Stop(stopCtx, &pb.Empty{}); err != nil {
				m.log.Warn("old plugin did not stop cleanly", "pid", old.pid, "error", err)
			}
			cancel()
			old.kill()
		}
		err = m.h.startInstance(ctx, next)
	})
	if err != nil {
		m.log.Error("new plugin failed to start after swap", "error", err)
		m.reloadsFailed.Add(1)
		m.casCur(next, nil)
		next.kill()
		m.q.setDown(true)
		m.setState(StateRestarting)
		m.goLocked(m.restartLoop)
		return err
	}
	m.q.setDown(false)
	m.setState(StateRunning)
	m.goLocked(func() { m.monitor(next) })
	m.notify()
	oldPID := 0
	if old != nil {
		oldPID = old.pid
	}
	m.reloadsOK.Add(1)
	m.log.Info("plugin reloaded", "version", next.info.Version, "pid", next.pid, "old_pid", oldPID)
	return nil
}

// close stops the plugin for good: delivery stops, the process is told to
// Stop and exits. It returns once the plugin's goroutines have returned.
func (m *managed) close() error {
	err := m.closeLocked()
	m.goroutines.Wait()
	return err
}

func (m *managed) closeLocked() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	// Give queued events a moment to reach the plugin.
	deadline := time.Now().Add(2 * time.Second)
	for m.cur.Load() != nil && m.q.pending() && time.Now().Before(deadline) {
		m.notify()
		time.Sleep(10 * time.Millisecond)
	}
	close(m.stop)
	var err error
	m.drained(drainGrace, func() {
		inst := m.swapCur(nil)
		m.setState(StateStopped)
		if inst == nil {
			return
		}
		inst.retire()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, serr := inst.rpc.Stop(ctx, &pb.Empty{}); serr != nil {
			err = fmt.Errorf("plugin %s: stop: %w", m.name, serr)
		}
		inst.kill()
	})
	return err
}

// curChanged returns a channel closed at the next change of cur.
func (m *managed) curChanged() <-chan struct{} {
	for {
		if ch := m.curChange.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		m.curChange.CompareAndSwap(nil, &ch)
	}
}

// notifyCur wakes the callers waiting in curChanged.
func (m *managed) notifyCur() {
	ch := make(chan struct{})
	if old := m.curChange.Swap(&ch); old != nil {
		close(*old)
	}
}

func (m *managed) setCur(inst *instance) {
	m.cur.Store(inst)
	m.notifyCur()
}

func (m *managed) swapCur(inst *instance) *instance {
	old := m.cur.Swap(inst)
	m.notifyCur()
	return old
}

func (m *managed) casCur(old, inst *instance) bool {
	if !m.cur.CompareAndSwap(old, inst) {
		return false
	}
	m.notifyCur()
	return true
}
