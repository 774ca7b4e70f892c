package sdk

import (
	"context"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
)

// hostClient is the hooks.Services a plugin gets in Start: each call goes to
// the server through the host over the go-plugin broker. Errors the server
// returns as *hooks.Error arrive as *hooks.Error.
type hostClient struct {
	c pb.HostServicesClient
}

func (h *hostClient) ServerInfo(ctx context.Context) (hooks.ServerInfo, error) {
	r, err := h.c.ServerInfo(ctx, &pb.Empty{})
	if err != nil {
		return hooks.ServerInfo{}, wire.Err(err)
	}
	return wire.ServerInfoFromPB(r), nil
}

func (h *hostClient) ListDBs(ctx context.Context) ([]hooks.DBInfo, error) {
	r, err := h.c.ListDBs(ctx, &pb.Empty{})
	if err != nil {
		return nil, wire.Err(err)
	}
	return wire.DBsFromPB(r), nil
}

func (h *hostClient) Changes(ctx context.Context, db, since string, limit int) (hooks.ChangesPage, error) {
	r, err := h.c.Changes(ctx, &pb.ChangesRequest{Db: db, Since: since, Limit: int32(limit)})
	if err != nil {
		return hooks.ChangesPage{}, wire.Err(err)
	}
	return wire.ChangesFromPB(r), nil
}

func (h *hostClient) GetDoc(ctx context.Context, db, docID string) ([]byte, error) {
	r, err := h.c.GetDoc(ctx, &pb.GetDocRequest{Db: db, DocId: docID})
	if err != nil {
		return nil, wire.Err(err)
	}
	return r.GetDoc(), nil
}

func (h *hostClient) UpdateDoc(ctx context.Context, db string, doc []byte) (string, error) {
	r, err := h.c.UpdateDoc(ctx, &pb.UpdateDocRequest{Db: db, Doc: doc})
	if err != nil {
		return "", wire.Err(err)
	}
	return r.GetRev(), nil
}
