package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var errHostOnly = errors.New("couchepi: the plugin client side lives in the host package")

// server implements the Plugin gRPC service on top of a Plugin.
type server struct {
	pb.UnimplementedPluginServer
	p      Plugin
	broker *plugin.GRPCBroker
	log    hclog.Logger

	// inflight counts sync hook and HTTP calls so Stop can drain them.
	inflight sync.WaitGroup
	mu       sync.Mutex
	conn     *grpc.ClientConn
	started  bool
	stopped  bool
}

// newServer serves p; log receives the server's warnings (nil: Logger()).
func newServer(p Plugin, broker *plugin.GRPCBroker, log hclog.Logger) *server {
	if log == nil {
		log = Logger()
	}
	return &server{p: p, broker: broker, log: log}
}

// recovered turns a panic in plugin code into a 500 error for the call, so
// one bad input does not take the whole plugin process down.
func (s *server) recovered(what string, err *error) {
	if r := recover(); r != nil {
		s.log.Error("plugin panicked", "call", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		*err = wire.ToStatus(&hooks.Error{Status: 500, Err: "unknown_error", Reason: fmt.Sprintf("plugin panicked in %s", what)})
	}
}

// enter registers an in-flight call; it fails once Stop began, so the host
// retries on the process that replaced this one.
func (s *server) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return status.Error(codes.Unavailable, "plugin is stopping")
	}
	s.inflight.Add(1)
	return nil
}

func (s *server) GetInfo(context.Context, *pb.Empty) (*pb.PluginInfo, error) {
	info := s.p.Info()
	if err := checkImplements(s.p, info); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return wire.InfoToPB(info), nil
}

// checkImplements refuses a plugin that subscribes to a hook it does not
// implement: the host would otherwise call it for nothing (sync hooks) or
// drop its events (after_* hooks) without anyone noticing.
func checkImplements(p Plugin, info hooks.PluginInfo) error {
	for _, sub := range info.Subscriptions {
		var ok bool
		var iface string
		switch sub.Hook {
		case hooks.BeforeDocUpdate:
			_, ok = p.(BeforeDocUpdater)
			iface = "sdk.BeforeDocUpdater"
		case hooks.AfterDocRead:
			_, ok = p.(AfterDocReader)
			iface = "sdk.AfterDocReader"
		case hooks.AfterDocWrite:
			_, ok = p.(AfterDocWriter)
			if _, batch := p.(DocWriteBatcher); batch {
				ok = true
			}
			iface = "sdk.AfterDocWriter or sdk.DocWriteBatcher"
		case hooks.AfterDBCreate, hooks.AfterDBDelete:
			_, ok = p.(DBWatcher)
			iface = "sdk.DBWatcher"
		case hooks.DBUpdated:
			_, ok = p.(DBUpdateWatcher)
			iface = "sdk.DBUpdateWatcher"
		default:
			continue // unknown hooks are the host's to refuse
		}
		if !ok {
			return fmt.Errorf("plugin %s subscribes to %s but does not implement %s", info.Name, sub.Hook, iface)
		}
	}
	return nil
}

func (s *server) Configure(ctx context.Context, req *pb.ConfigureRequest) (*pb.Empty, error) {
	return &pb.Empty{}, wire.ToStatus(s.p.Configure(ctx, wire.ConfigFromPB(req)))
}

func (s *server) Start(ctx context.Context, req *pb.StartRequest) (*pb.Empty, error) {
	conn, err := s.broker.Dial(req.GetHostServicesBrokerId())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "dial host services: %v", err)
	}
	s.mu.Lock()
	s.conn = conn
	s.started = true
	s.mu.Unlock()
	if err := s.p.Start(ctx, &hostClient{c: pb.NewHostServicesClient(conn)}); err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.Empty{}, nil
}

// Stop refuses new sync calls, waits for in-flight ones, then stops the plugin.
func (s *server) Stop(ctx context.Context, _ *pb.Empty) (*pb.Empty, error) {
	s.mu.Lock()
	already := s.stopped
	s.stopped = true
	started := s.started
	s.mu.Unlock()
	if already {
		return &pb.Empty{}, nil
	}
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	var err error
	if started {
		err = s.p.Stop(ctx)
	}
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	s.mu.Unlock()
	return &pb.Empty{}, wire.ToStatus(err)
}

func (s *server) Health(ctx context.Context, _ *pb.Empty) (*pb.Empty, error) {
	if hc, ok := s.p.(HealthChecker); ok {
		if err := hc.Health(ctx); err != nil {
			return nil, wire.ToStatus(err)
		}
	}
	return &pb.Empty{}, nil
}

func (s *server) BeforeDocUpdate(ctx context.Context, req *pb.DocHookRequest) (_ *pb.DocHookReply, err error) {
	defer s.recovered("before_doc_update", &err)
	h, ok := s.p.(BeforeDocUpdater)
	if !ok {
		return &pb.DocHookReply{Doc: req.GetDoc()}, nil
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	doc, err := h.BeforeDocUpdate(ctx, req.GetDb(), req.GetDoc(), wire.UserCtxFromPB(req.GetUser()))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.DocHookReply{Doc: doc}, nil
}

func (s *server) AfterDocRead(ctx context.Context, req *pb.DocHookRequest) (_ *pb.DocHookReply, err error) {
	defer s.recovered("after_doc_read", &err)
	h, ok := s.p.(AfterDocReader)
	if !ok {
		return &pb.DocHookReply{Doc: req.GetDoc()}, nil
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	doc, err := h.AfterDocRead(ctx, req.GetDb(), req.GetDoc(), wire.UserCtxFromPB(req.GetUser()))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.DocHookReply{Doc: doc}, nil
}

// Deliver hands a batch of after_* events to the plugin in order. When a
// handler fails, later events of that db are skipped and the db is reported
// for CatchUp, so the host never loses them silently. For a DocWriteBatcher,
// each run of consecutive after_doc_write events of one db is one call.
func (s *server) Deliver(ctx context.Context, req *pb.DeliverRequest) (_ *pb.DeliverReply, err error) {
	defer s.recovered("deliver", &err)
	var failed map[string]bool
	reply := &pb.DeliverReply{}
	fail := func(hook, db string, err error) {
		s.log.Warn("event handler failed; asking for catch-up", "hook", hook, "db", db, "error", err)
		if failed == nil {
			failed = map[string]bool{}
		}
		failed[db] = true
		reply.CatchUp = append(reply.CatchUp, db)
	}
	batcher, _ := s.p.(DocWriteBatcher)
	events := req.GetEvents()
	for i := 0; i < len(events); i++ {
		ev := events[i]
		db := ev.GetDb()
		if failed[db] {
			continue
		}
		err = nil
		switch hooks.Hook(ev.GetHook()) {
		case hooks.AfterDocWrite:
			if batcher != nil {
				run := []hooks.DocWrite{wire.DocWriteFromPB(ev)}
				for i+1 < len(events) && events[i+1].GetDb() == db && hooks.Hook(events[i+1].GetHook()) == hooks.AfterDocWrite {
					i++
					run = append(run, wire.DocWriteFromPB(events[i]))
				}
				err = batcher.AfterDocWrites(ctx, db, run)
			} else if h, ok := s.p.(AfterDocWriter); ok {
				err = h.AfterDocWrite(ctx, wire.DocWriteFromPB(ev))
			}
		case hooks.AfterDBCreate:
			if h, ok := s.p.(DBWatcher); ok {
				err = h.AfterDBCreate(ctx, db, ev.GetDbUuid())
			}
		case hooks.AfterDBDelete:
			if h, ok := s.p.(DBWatcher); ok {
				err = h.AfterDBDelete(ctx, db, ev.GetDbUuid())
			}
		case hooks.DBUpdated:
			if h, ok := s.p.(DBUpdateWatcher); ok {
				err = h.DBUpdated(ctx, db, ev.GetSeq())
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, wire.ToStatus(ctx.Err())
			}
			fail(ev.GetHook(), db, err)
		}
	}
	return reply, nil
}

func (s *server) CatchUp(ctx context.Context, req *pb.CatchUpRequest) (_ *pb.Empty, err error) {
	defer s.recovered("catch_up", &err)
	if h, ok := s.p.(CatchUpper); ok {
		if err := h.CatchUp(ctx, req.GetDb()); err != nil {
			return nil, wire.ToStatus(err)
		}
	}
	return &pb.Empty{}, nil
}

func (s *server) ActiveTasks(ctx context.Context, _ *pb.Empty) (*pb.ActiveTasksReply, error) {
	h, ok := s.p.(ActiveTasker)
	if !ok {
		return &pb.ActiveTasksReply{}, nil
	}
	tasks, err := h.ActiveTasks(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	reply := &pb.ActiveTasksReply{Tasks: make([][]byte, len(tasks))}
	for i, t := range tasks {
		reply.Tasks[i] = t
	}
	return reply, nil
}

func (s *server) ServeHTTP(stream pb.Plugin_ServeHTTPServer) (err error) {
	defer s.recovered("http handler", &err)
	h, ok := s.p.(http.Handler)
	if !ok {
		return status.Error(codes.Unimplemented, "plugin serves no HTTP routes")
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	return serveHTTP(h, stream)
}
