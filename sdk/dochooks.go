package sdk

import (
	"context"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DocHooks serves before_doc_update and after_doc_read calls arriving one
// after another on a long-lived stream. Each call goes through the same
// code as the unary RPC (panic recovery, refusal once Stop began, in-flight
// accounting), with the host's timeout as its deadline. A rejection travels
// in the result and the stream goes on; any other failure ends the stream
// with its gRPC status, which the host handles as it would the unary call's.
func (s *server) DocHooks(stream pb.Plugin_DocHooksServer) error {
	for {
		call, err := stream.Recv()
		if err != nil {
			return err
		}
		result, err := s.docHookCall(stream.Context(), call)
		if err != nil {
			return err
		}
		if err := stream.Send(result); err != nil {
			return err
		}
	}
}

// docHookCall answers one call of a DocHooks stream.
func (s *server) docHookCall(ctx context.Context, call *pb.DocHookCall) (*pb.DocHookResult, error) {
	if t := call.GetTimeoutMicros(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Microsecond)
		defer cancel()
	}
	var reply *pb.DocHookReply
	var err error
	switch hooks.Hook(call.GetHook()) {
	case hooks.BeforeDocUpdate:
		reply, err = s.BeforeDocUpdate(ctx, call.GetRequest())
	case hooks.AfterDocRead:
		reply, err = s.AfterDocRead(ctx, call.GetRequest())
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown document hook %q", call.GetHook())
	}
	if err != nil {
		if ce := wire.FromStatus(err); ce != nil {
			return &pb.DocHookResult{Error: &pb.CouchError{Status: int32(ce.Status), Error: ce.Err, Reason: ce.Reason}}, nil
		}
		return nil, err
	}
	return &pb.DocHookResult{Doc: reply.GetDoc()}, nil
}
