package host

import (
	"context"
	"time"

	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// batchSize is the most events sent in one Deliver call.
const batchSize = 256

// deliverTimeout bounds one Deliver or CatchUp call; on timeout the events
// are sent again (at-least-once).
const deliverTimeout = 5 * time.Minute

func (m *managed) enqueue(ev *pb.Event) {
	m.q.push(ev)
	m.notify()
}

// minRetryWait and maxRetryWait bound the wait before a failed call (a
// transport failure, or a db's failed catch-up, for that db only: the
// others go on) is tried again; it doubles while calls keep failing, so a
// plugin whose own store is down is asked less and less often.
const (
	minRetryWait = 200 * time.Millisecond
	maxRetryWait = 10 * time.Second
)

// deliverLoop sends queued catch-ups and events to the started instance,
// one call at a time, until the plugin is closed. Events are removed from
// the queue only when the plugin acknowledged them; a failed call puts them
// back, to be sent to the next process.
func (m *managed) deliverLoop() {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-retry.C:
		}
		for {
			progressed, retryIn := m.deliverOnce()
			if retryIn > 0 {
				retry.Reset(retryIn)
			}
			if !progressed {
				break
			}
		}
	}
}

// failed counts a failed call and returns how long to wait before the
// next try: it doubles from minRetryWait to maxRetryWait while calls keep
// failing. The failure is logged once per interval with a count.
func (m *managed) failed(msg string, args ...any) time.Duration {
	m.mu.Lock()
	log, n, lasted := m.deliveryFailures.Fail(time.Now())
	wait := min(minRetryWait<<min(n-1, 10), maxRetryWait)
	m.mu.Unlock()
	if log {
		m.log.Warn(msg, append(args, "failures", n, "lasted", lasted.Round(time.Millisecond).String(), "retry_in", wait.String())...)
	}
	return wait
}

// deliveredAgain ends a run of failed calls, logging that it ended.
func (m *managed) deliveredAgain() {
	m.mu.Lock()
	n, lasted := m.deliveryFailures.Recover(time.Now())
	m.mu.Unlock()
	if n > 0 {
		m.log.Info("event delivery and catch-up work again", "failures", n, "lasted", lasted.Round(time.Millisecond).String())
	}
}

// deliverOnce makes at most one round of calls; it reports whether anything
// was delivered and, when a call failed, when to try again (0: no need).
// A transport failure stops the round; a db whose catch-up the plugin
// failed is put off while the round goes on with the others.
func (m *managed) deliverOnce() (progressed bool, retryIn time.Duration) {
	m.deliverMu.Lock()
	defer m.deliverMu.Unlock()
	select {
	case <-m.stop:
		return false, 0
	default:
	}
	inst := m.cur.Load()
	if inst == nil || !inst.isStarted() {
		return false, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
	defer cancel()
	m.mu.Lock()
	m.cancelDelivery = cancel
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.cancelDelivery = nil
		m.mu.Unlock()
	}()
	dbs := m.q.takeCatchUps(time.Now())
	for i, db := range dbs {
		_, err := inst.rpc.CatchUp(ctx, &pb.CatchUpRequest{Db: db})
		switch {
		case err == nil:
			m.catchUps.Add(1)
			progressed = true
		case pluginFailed(err):
			// The plugin answered: it is alive, only unable to catch up
			// this db for now (its job store unreachable, say). Its own
			// events wait meanwhile: the catch-up reads them.
			wait := m.failed("catch-up failed; will retry", "db", db, "error", wire.Err(err))
			m.q.deferCatchUp(db, time.Now().Add(wait))
			if retryIn == 0 || wait < retryIn {
				retryIn = wait
			}
		default:
			wait := m.failed("catch-up failed; will retry", "db", db, "error", wire.Err(err))
			for _, d := range dbs[i:] {
				m.q.markCatchUp(d)
			}
			inst.reportTransportError()
			return false, wait
		}
	}
	batch := m.q.take(batchSize)
	if len(batch) == 0 {
		if progressed && retryIn == 0 {
			m.deliveredAgain()
		}
		return progressed, retryIn
	}
	reply, err := inst.rpc.Deliver(ctx, &pb.DeliverRequest{Events: batch})
	if ce := wire.FromStatus(err); ce != nil {
		// The plugin answered but failed the batch: it catches up instead.
		// (A handler's own failure is not this: the sdk reports it per db
		// in the reply.)
		m.failed("plugin failed an event batch; asking for catch-up", "events", len(batch), "error", ce)
		for _, ev := range batch {
			m.q.markCatchUp(ev.GetDb())
		}
		return true, retryIn
	}
	if err != nil {
		wait := m.failed("event delivery failed; will resend", "events", len(batch), "error", wire.Err(err))
		m.q.unshift(batch)
		inst.reportTransportError()
		return false, wait
	}
	if retryIn == 0 {
		m.deliveredAgain()
	}
	m.delivered.Add(uint64(len(batch)))
	for _, db := range reply.GetCatchUp() {
		m.q.markCatchUp(db)
	}
	return true, retryIn
}

// pluginFailed reports whether err is the plugin's own answer to a call
// (its handler returned an error: a CouchDB error, or any other, which the
// sdk sends as Internal), rather than a call that did not reach the plugin
// or did not end (the process gone or stopping, a timeout).
func pluginFailed(err error) bool {
	return wire.FromStatus(err) != nil || status.Code(err) == codes.Internal
}

// drained runs fn with no event delivery in flight: it takes deliverMu,
// waiting up to grace for the delivery in flight to finish before
// cancelling it (its events are then sent again), and releases deliverMu
// when fn returns.
func (m *managed) drained(grace time.Duration, fn func()) {
	acquired := make(chan struct{})
	go func() {
		select {
		case <-acquired:
		case <-time.After(grace):
			m.mu.Lock()
			if m.cancelDelivery != nil {
				m.log.Warn("event delivery still running after grace period; cancelling it", "grace", grace.String())
				m.cancelDelivery()
			}
			m.mu.Unlock()
		}
	}()
	m.deliverMu.Lock()
	defer m.deliverMu.Unlock()
	close(acquired)
	fn()
}
