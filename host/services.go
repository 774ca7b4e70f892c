package host

import (
	"context"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// servicesServer serves the server's hooks.Services to a plugin over the
// go-plugin broker; *hooks.Error results travel to the plugin intact.
type servicesServer struct {
	pb.UnimplementedHostServicesServer
	svc hooks.Services
}

var errNoServices = status.Error(codes.Unimplemented, "the server offers no host services")

func (s *servicesServer) ServerInfo(ctx context.Context, _ *pb.Empty) (*pb.ServerInfoReply, error) {
	if s.svc == nil {
		return nil, errNoServices
	}
	info, err := s.svc.ServerInfo(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ServerInfoToPB(info), nil
}

func (s *servicesServer) ListDBs(ctx context.Context, _ *pb.Empty) (*pb.ListDBsReply, error) {
	if s.svc == nil {
		return nil, errNoServices
	}
	dbs, err := s.svc.ListDBs(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.DBsToPB(dbs), nil
}

func (s *servicesServer) Changes(ctx context.Context, req *pb.ChangesRequest) (*pb.ChangesReply, error) {
	if s.svc == nil {
		return nil, errNoServices
	}
	page, err := s.svc.Changes(ctx, req.GetDb(), req.GetSince(), int(req.GetLimit()))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ChangesToPB(page), nil
}

func (s *servicesServer) GetDoc(ctx context.Context, req *pb.GetDocRequest) (*pb.DocReply, error) {
	if s.svc == nil {
		return nil, errNoServices
	}
	doc, err := s.svc.GetDoc(ctx, req.GetDb(), req.GetDocId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.DocReply{Doc: doc}, nil
}

func (s *servicesServer) UpdateDoc(ctx context.Context, req *pb.UpdateDocRequest) (*pb.UpdateDocReply, error) {
	if s.svc == nil {
		return nil, errNoServices
	}
	rev, err := s.svc.UpdateDoc(ctx, req.GetDb(), req.GetDoc())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.UpdateDocReply{Rev: rev}, nil
}
