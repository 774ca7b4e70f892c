package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// BeforeDocUpdate runs before_doc_update for a write to db, through every
// subscribed plugin in load order, each getting the doc the previous one
// returned. It returns the doc to store, or a *hooks.Error: the plugin's
// rejection as-is, or 503 service_unavailable when a subscribed plugin is
// down or does not answer within HookTimeout — a write is never let
// through unchecked. Unsubscribed dbs cost one lock-free lookup.
func (h *Host) BeforeDocUpdate(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	return h.docHook(ctx, hooks.BeforeDocUpdate, db, doc, user)
}

// AfterDocRead runs after_doc_read for a doc of db about to be returned to
// user, through every subscribed plugin in load order; it returns the doc to
// send or a *hooks.Error (503 when a subscribed plugin cannot answer).
func (h *Host) AfterDocRead(ctx context.Context, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	return h.docHook(ctx, hooks.AfterDocRead, db, doc, user)
}

func (h *Host) docHook(ctx context.Context, hook hooks.Hook, db string, doc []byte, user hooks.UserCtx) ([]byte, error) {
	entries := h.table.Load().hooks[hookIndex(hook)]
	var err error
	for k := range entries {
		if !entries[k].match(db) {
			continue
		}
		m := entries[k].m
		start := time.Now()
		var result string
		doc, result, err = h.callDocHook(ctx, m, hook, db, doc, user)
		m.mx.hook(hook).observe(result, time.Since(start).Seconds())
		if err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// curChangeWait bounds how long a sync hook call that found its plugin
// unavailable waits for another instance to take over.
const curChangeWait = 20 * time.Millisecond

// callDocHook calls one plugin. A call that fails because the process was
// swapped out meanwhile is retried on its successor. result says how the
// call ended, for the metrics: resultOK, resultRejected or resultUnavailable.
func (h *Host) callDocHook(ctx context.Context, m *managed, hook hooks.Hook, db string, doc []byte, user hooks.UserCtx) (_ []byte, result string, _ error) {
	req := &pb.DocHookRequest{Db: db, Doc: doc, User: wire.UserCtxToPB(user)}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		inst := m.cur.Load()
		if inst == nil {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, h.cfg.HookTimeout)
		out, ce, err := inst.docHook(cctx, hook, req)
		// The plugin's side of the deadline may fire a hair before ours.
		timedOut := cctx.Err() == context.DeadlineExceeded || status.Code(err) == codes.DeadlineExceeded
		cancel()
		if ce != nil {
			return nil, resultRejected, ce
		}
		if err == nil {
			return out, resultOK, nil
		}
		if ctx.Err() != nil {
			return nil, resultUnavailable, hooks.ServiceUnavailable(fmt.Sprintf("request ended before plugin %s answered %s for %s", m.name, hook, db))
		}
		if timedOut {
			m.log.Warn("hook timed out", "hook", string(hook), "db", db, "timeout", h.cfg.HookTimeout.String())
			return nil, resultUnavailable, hooks.ServiceUnavailable(fmt.Sprintf("plugin %s did not answer %s for %s within %s", m.name, hook, db, h.cfg.HookTimeout))
		}
		lastErr = err
		if m.cur.Load() != inst {
			continue // swapped during the call: ask the new process
		}
		if status.Code(err) == codes.Unavailable {
			inst.reportTransportError()
			// The process may be on its way out (a swap, a crash the
			// monitor is about to see): wait for the change of instance,
			// briefly, instead of failing the write at once.
			changed := m.curChanged()
			if m.cur.Load() != inst {
				continue
			}
			t := time.NewTimer(curChangeWait)
			select {
			case <-changed:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			if m.cur.Load() != inst {
				continue
			}
		}
		break
	}
	reason := fmt.Sprintf("plugin %s is not available to validate writes to %s", m.name, db)
	if hook == hooks.AfterDocRead {
		reason = fmt.Sprintf("plugin %s is not available to filter reads of %s", m.name, db)
	}
	if lastErr != nil {
		m.log.Warn("hook call failed", "hook", string(hook), "db", db, "error", lastErr)
	}
	return nil, resultUnavailable, hooks.ServiceUnavailable(reason)
}

// AfterDocWrite queues after_doc_write for the plugins subscribed to ev.DB.
// It never blocks. The host keeps ev.Doc: do not modify it afterwards.
func (h *Host) AfterDocWrite(ev hooks.DocWrite) {
	entries := h.table.Load().hooks[hookIndex(hooks.AfterDocWrite)]
	var msg *pb.Event
	for k := range entries {
		if !entries[k].match(ev.DB) {
			continue
		}
		if msg == nil {
			msg = wire.DocWriteToPB(ev)
		}
		entries[k].m.enqueue(msg)
	}
}

// AfterDBCreate queues after_db_create for the subscribed plugins.
func (h *Host) AfterDBCreate(db, uuid string) { h.dbEvent(hooks.AfterDBCreate, db, uuid) }

// AfterDBDelete queues after_db_delete for the subscribed plugins.
func (h *Host) AfterDBDelete(db, uuid string) { h.dbEvent(hooks.AfterDBDelete, db, uuid) }

func (h *Host) dbEvent(hook hooks.Hook, db, uuid string) {
	entries := h.table.Load().hooks[hookIndex(hook)]
	var msg *pb.Event
	for k := range entries {
		if !entries[k].match(db) {
			continue
		}
		if msg == nil {
			msg = &pb.Event{Hook: string(hook), Db: db, DbUuid: uuid}
		}
		entries[k].m.enqueue(msg)
	}
}

// DBUpdated queues db_updated for the plugins subscribed to db: a write
// changed db's update sequence to seq. Call it after the write is durable,
// for every write that moves the update sequence (not for _local docs). It
// never blocks; a db's undelivered db_updated events are coalesced.
func (h *Host) DBUpdated(db, seq string) {
	entries := h.table.Load().hooks[hookIndex(hooks.DBUpdated)]
	var msg *pb.Event
	for k := range entries {
		if !entries[k].match(db) {
			continue
		}
		if msg == nil {
			msg = &pb.Event{Hook: string(hooks.DBUpdated), Db: db, Seq: seq}
		}
		entries[k].m.enqueue(msg)
	}
}

// ActiveTasks merges the _active_tasks entries of every live plugin.
func (h *Host) ActiveTasks(ctx context.Context) []json.RawMessage {
	h.mu.Lock()
	ms := append([]*managed(nil), h.plugins...)
	h.mu.Unlock()
	out := []json.RawMessage{}
	for _, m := range ms {
		inst := m.cur.Load()
		if inst == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, h.cfg.HookTimeout)
		reply, err := inst.rpc.ActiveTasks(cctx, &pb.Empty{})
		cancel()
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				m.log.Warn("active tasks failed", "error", wire.Err(err))
			}
			continue
		}
		for _, t := range reply.GetTasks() {
			out = append(out, json.RawMessage(t))
		}
	}
	return out
}
