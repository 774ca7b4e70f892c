package host

import (
	"context"
	"time"

	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
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

// deliverLoop sends queued catch-ups and events to the started instance,
// one call at a time, until the plugin is closed. Events are removed from
// the queue only when the plugin acknowledged them; a failed call puts them
// back, to be sent to the next process.
func (m *managed) deliverLoop() {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	wait := minRetryWait
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-retry.C:
		}
		for {
			progressed, failed := m.deliverOnce()
			if failed {
				// A plugin that keeps failing (its store unreachable, say)
				// is asked again less and less often.
				retry.Reset(wait)
				wait = min(wait*2, maxRetryWait)
				break
			}
			wait = minRetryWait
			if !progressed {
				break
			}
		}
	}
}

// minRetryWait and maxRetryWait bound the wait before a failed delivery or
// catch-up is tried again; it doubles while they keep failing.
const (
	minRetryWait = 200 * time.Millisecond
	maxRetryWait = 10 * time.Second
)

// failed counts a failed delivery or catch-up, logging it once per
// interval with a count (a plugin whose store is down fails every retry).
func (m *managed) failed(msg string, args ...any) {
	m.mu.Lock()
	log, n, lasted := m.deliveryFailures.Fail(time.Now())
	m.mu.Unlock()
	if log {
		m.log.Warn(msg, append(args, "failures", n, "lasted", lasted.Round(time.Millisecond).String())...)
	}
}

// deliveredAgain ends a run of failed deliveries, logging that it ended.
func (m *managed) deliveredAgain() {
	m.mu.Lock()
	n, lasted := m.deliveryFailures.Recover(time.Now())
	m.mu.Unlock()
	if n > 0 {
		m.log.Info("event delivery and catch-up work again", "failures", n, "lasted", lasted.Round(time.Millisecond).String())
	}
}

// deliverOnce makes at most one round of calls; it reports whether anything
// was delivered and whether a call failed.
func (m *managed) deliverOnce() (progressed, failed bool) {
	m.deliverMu.Lock()
	defer m.deliverMu.Unlock()
	select {
	case <-m.stop:
		return false, false
	default:
	}
	inst := m.cur.Load()
	if inst == nil || !inst.isStarted() {
		return false, false
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
	dbs := m.q.takeCatchUps()
	for i, db := range dbs {
		if _, err := inst.rpc.CatchUp(ctx, &pb.CatchUpRequest{Db: db}); err != nil {
			for _, d := range dbs[i:] {
				m.q.markCatchUp(d)
			}
			if wire.FromStatus(err) != nil {
				// The plugin answered: it is alive, only unable to catch
				// up for now (its job store unreachable, say).
				m.failed("catch-up failed; will retry", "db", db, "pending_dbs", len(dbs)-i, "error", wire.Err(err))
			} else {
				m.failed("catch-up failed; will retry", "db", db, "error", wire.Err(err))
				inst.reportTransportError()
			}
			return true, true
		}
		m.catchUps.Add(1)
		progressed = true
	}
	batch := m.q.take(batchSize)
	if len(batch) == 0 {
		if progressed {
			m.deliveredAgain()
		}
		return progressed, false
	}
	reply, err := inst.rpc.Deliver(ctx, &pb.DeliverRequest{Events: batch})
	if ce := wire.FromStatus(err); ce != nil {
		// The plugin answered but failed the batch: it catches up instead.
		m.failed("plugin failed an event batch; asking for catch-up", "events", len(batch), "error", ce)
		for _, ev := range batch {
			m.q.markCatchUp(ev.GetDb())
		}
		return true, false
	}
	if err != nil {
		m.failed("event delivery failed; will resend", "events", len(batch), "error", wire.Err(err))
		m.q.unshift(batch)
		inst.reportTransportError()
		return true, true
	}
	m.deliveredAgain()
	m.delivered.Add(uint64(len(batch)))
	for _, db := range reply.GetCatchUp() {
		m.q.markCatchUp(db)
	}
	return true, false
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
