package host

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// idleHookStreams is how many idle DocHooks streams an instance keeps for
// reuse; more concurrent callers open extra streams that close after use.
const idleHookStreams = 32

// hookStream is one DocHooks stream, used by one caller at a time.
type hookStream struct {
	s      pb.Plugin_DocHooksClient
	cancel context.CancelFunc
}

// docHook calls before_doc_update or after_doc_read on the instance: on a
// reused DocHooks stream, or with the unary RPC for a plugin built before
// DocHooks existed. It returns the doc, or the plugin's rejection, or the
// gRPC error of a call that got no answer (ctx ended, transport failure,
// plugin stopping).
func (i *instance) docHook(ctx context.Context, hook hooks.Hook, req *pb.DocHookRequest) ([]byte, *hooks.Error, error) {
	if !i.unaryHooks.Load() {
		doc, ce, err := i.streamDocHook(ctx, hook, req)
		if status.Code(err) != codes.Unimplemented {
			return doc, ce, err
		}
		i.unaryHooks.Store(true)
	}
	var reply *pb.DocHookReply
	var err error
	if hook == hooks.BeforeDocUpdate {
		reply, err = i.rpc.BeforeDocUpdate(ctx, req)
	} else {
		reply, err = i.rpc.AfterDocRead(ctx, req)
	}
	if err != nil {
		if ce := wire.FromStatus(err); ce != nil {
			return nil, ce, nil
		}
		return nil, nil, err
	}
	return reply.GetDoc(), nil, nil
}

// streamDocHook makes one call on an idle stream (or a new one). The stream
// goes back to the pool after a full answer; a call that ends otherwise
// (ctx done, error) takes its stream down with it, which also cancels the
// call in the plugin.
func (i *instance) streamDocHook(ctx context.Context, hook hooks.Hook, req *pb.DocHookRequest) ([]byte, *hooks.Error, error) {
	hs, err := i.takeHookStream()
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, hs.cancel)
	call := &pb.DocHookCall{Hook: string(hook), Request: req}
	if deadline, ok := ctx.Deadline(); ok {
		call.TimeoutMicros = max(time.Until(deadline).Microseconds(), 1)
	}
	var res *pb.DocHookResult
	err = hs.s.Send(call)
	if err == nil || errors.Is(err, io.EOF) {
		// After io.EOF from Send, Recv returns the status that ended the stream.
		res, err = hs.s.Recv()
	}
	if !stop() || err != nil {
		hs.cancel()
	} else {
		i.putHookStream(hs)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "plugin ended the hook stream")
		}
		return nil, nil, err
	}
	if e := res.GetError(); e != nil {
		return nil, &hooks.Error{Status: int(e.GetStatus()), Err: e.GetError(), Reason: e.GetReason()}, nil
	}
	return res.GetDoc(), nil, nil
}

func (i *instance) takeHookStream() (*hookStream, error) {
	select {
	case hs := <-i.hookStreams:
		return hs, nil
	default:
	}
	ctx, cancel := context.WithCancel(i.streamCtx)
	s, err := i.rpc.DocHooks(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &hookStream{s: s, cancel: cancel}, nil
}

func (i *instance) putHookStream(hs *hookStream) {
	if i.streamCtx.Err() != nil {
		hs.cancel()
		return
	}
	select {
	case i.hookStreams <- hs:
	default:
		hs.cancel()
	}
}
