// Package wire converts between the hooks Go types and their hookspb
// messages, and carries CouchDB-shaped errors (*hooks.Error) across gRPC in
// both directions. It is shared by the host and the sdk; plugin authors do
// not need it.
package wire

import (
	"context"
	"errors"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// codeFor picks the gRPC code closest to an HTTP status; the exact CouchDB
// status always travels in the CouchError detail.
func codeFor(httpStatus int) codes.Code {
	switch {
	case httpStatus == 400:
		return codes.InvalidArgument
	case httpStatus == 401:
		return codes.Unauthenticated
	case httpStatus == 403:
		return codes.PermissionDenied
	case httpStatus == 404:
		return codes.NotFound
	case httpStatus == 409:
		return codes.Aborted
	case httpStatus == 412:
		return codes.FailedPrecondition
	case httpStatus == 429:
		return codes.ResourceExhausted
	case httpStatus == 503:
		return codes.Unavailable
	case httpStatus >= 500:
		return codes.Internal
	default:
		return codes.Unknown
	}
}

// ToStatus turns err into a gRPC status error. A *hooks.Error (anywhere in
// err's chain) travels intact as a CouchError detail; context errors keep
// their gRPC meaning; anything else becomes codes.Internal. nil stays nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	var ce *hooks.Error
	if errors.As(err, &ce) {
		st := status.New(codeFor(ce.Status), ce.Err+": "+ce.Reason)
		if withDetail, derr := st.WithDetails(protoadapt.MessageV1Of(&pb.CouchError{
			Status: int32(ce.Status), Error: ce.Err, Reason: ce.Reason,
		})); derr == nil {
			st = withDetail
		}
		return st.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// FromStatus returns the *hooks.Error carried by a gRPC status error, or nil
// when err carries none (a transport failure, timeout or plain error).
func FromStatus(err error) *hooks.Error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if ce, ok := d.(*pb.CouchError); ok {
			return &hooks.Error{Status: int(ce.GetStatus()), Err: ce.GetError(), Reason: ce.GetReason()}
		}
	}
	return nil
}

// Err returns the *hooks.Error carried by err when there is one, err itself
// otherwise.
func Err(err error) error {
	if ce := FromStatus(err); ce != nil {
		return ce
	}
	return err
}

// UserCtxToPB converts a user context to its message.
func UserCtxToPB(u hooks.UserCtx) *pb.UserCtx {
	return &pb.UserCtx{Name: u.Name, Roles: u.Roles}
}

// UserCtxFromPB converts a user context message (nil = anonymous).
func UserCtxFromPB(u *pb.UserCtx) hooks.UserCtx {
	if u == nil {
		return hooks.UserCtx{Roles: []string{}}
	}
	roles := u.GetRoles()
	if roles == nil {
		roles = []string{}
	}
	return hooks.UserCtx{Name: u.GetName(), Roles: roles}
}

// InfoToPB converts plugin info to its message.
func InfoToPB(i hooks.PluginInfo) *pb.PluginInfo {
	m := &pb.PluginInfo{Name: i.Name, Version: i.Version}
	for _, s := range i.Subscriptions {
		m.Subscriptions = append(m.Subscriptions, &pb.Subscription{Hook: string(s.Hook), Db: s.DB})
	}
	for _, r := range i.Routes {
		m.Routes = append(m.Routes, &pb.Route{Method: r.Method, Path: r.Path})
	}
	return m
}

// InfoFromPB converts a plugin info message.
func InfoFromPB(m *pb.PluginInfo) hooks.PluginInfo {
	i := hooks.PluginInfo{Name: m.GetName(), Version: m.GetVersion()}
	for _, s := range m.GetSubscriptions() {
		i.Subscriptions = append(i.Subscriptions, hooks.Subscription{Hook: hooks.Hook(s.GetHook()), DB: s.GetDb()})
	}
	for _, r := range m.GetRoutes() {
		i.Routes = append(i.Routes, hooks.Route{Method: r.GetMethod(), Path: r.GetPath()})
	}
	return i
}

// ConfigToPB converts a server config to its message.
func ConfigToPB(c hooks.Config) *pb.ConfigureRequest {
	m := &pb.ConfigureRequest{Sections: make(map[string]*pb.Section, len(c))}
	for name, kv := range c {
		vals := make(map[string]string, len(kv))
		for k, v := range kv {
			vals[k] = v
		}
		m.Sections[name] = &pb.Section{Values: vals}
	}
	return m
}

// ConfigFromPB converts a config message.
func ConfigFromPB(m *pb.ConfigureRequest) hooks.Config {
	c := make(hooks.Config, len(m.GetSections()))
	for name, s := range m.GetSections() {
		kv := make(map[string]string, len(s.GetValues()))
		for k, v := range s.GetValues() {
			kv[k] = v
		}
		c[name] = kv
	}
	return c
}

// DocWriteToPB converts an after_doc_write event to its message.
func DocWriteToPB(ev hooks.DocWrite) *pb.Event {
	return &pb.Event{Hook: string(hooks.AfterDocWrite), Db: ev.DB, DbUuid: ev.DBUUID, DocId: ev.DocID,
		Rev: ev.Rev, Seq: ev.Seq, Deleted: ev.Deleted, Doc: ev.Doc}
}

// DocWriteFromPB converts an event message to an after_doc_write event.
func DocWriteFromPB(m *pb.Event) hooks.DocWrite {
	return hooks.DocWrite{DB: m.GetDb(), DBUUID: m.GetDbUuid(), DocID: m.GetDocId(), Rev: m.GetRev(),
		Seq: m.GetSeq(), Deleted: m.GetDeleted(), Doc: m.GetDoc()}
}

// ServerInfoToPB converts server info to its message.
func ServerInfoToPB(s hooks.ServerInfo) *pb.ServerInfoReply {
	return &pb.ServerInfoReply{Uuid: s.UUID, Version: s.Version, Vendor: s.Vendor, Node: s.Node, Url: s.URL}
}

// ServerInfoFromPB converts a server info message.
func ServerInfoFromPB(m *pb.ServerInfoReply) hooks.ServerInfo {
	return hooks.ServerInfo{UUID: m.GetUuid(), Version: m.GetVersion(), Vendor: m.GetVendor(), Node: m.GetNode(), URL: m.GetUrl()}
}

// DBsToPB converts a db list to its message.
func DBsToPB(dbs []hooks.DBInfo) *pb.ListDBsReply {
	m := &pb.ListDBsReply{Dbs: make([]*pb.DBInfo, len(dbs))}
	for i, d := range dbs {
		m.Dbs[i] = &pb.DBInfo{Name: d.Name, Uuid: d.UUID, UpdateSeq: d.UpdateSeq}
	}
	return m
}

// DBsFromPB converts a db list message.
func DBsFromPB(m *pb.ListDBsReply) []hooks.DBInfo {
	dbs := make([]hooks.DBInfo, len(m.GetDbs()))
	for i, d := range m.GetDbs() {
		dbs[i] = hooks.DBInfo{Name: d.GetName(), UUID: d.GetUuid(), UpdateSeq: d.GetUpdateSeq()}
	}
	return dbs
}

// ChangesToPB converts a changes page to its message.
func ChangesToPB(p hooks.ChangesPage) *pb.ChangesReply {
	m := &pb.ChangesReply{LastSeq: p.LastSeq, Pending: p.Pending, Results: make([]*pb.Change, len(p.Results))}
	for i, c := range p.Results {
		m.Results[i] = &pb.Change{Seq: c.Seq, Id: c.ID, Revs: c.Revs, Deleted: c.Deleted}
	}
	return m
}

// ChangesFromPB converts a changes page message.
func ChangesFromPB(m *pb.ChangesReply) hooks.ChangesPage {
	p := hooks.ChangesPage{LastSeq: m.GetLastSeq(), Pending: m.GetPending(), Results: make([]hooks.Change, len(m.GetResults()))}
	for i, c := range m.GetResults() {
		p.Results[i] = hooks.Change{Seq: c.GetSeq(), ID: c.GetId(), Revs: c.GetRevs(), Deleted: c.GetDeleted()}
	}
	return p
}

// MaxMsgSize bounds one gRPC message either way on a plugin connection (a
// doc in a hook call or an event batch); HTTP bodies are streamed in small
// chunks and never come near it.
const MaxMsgSize = 256 << 20

// WindowSize and ConnWindowSize are the fixed HTTP/2 flow-control windows
// (per stream, per connection) that both sides of a plugin connection set.
// Any explicit window turns off gRPC's bandwidth-delay estimator, which
// otherwise sends a PING round after nearly every hook call's data: one more
// write, read and wake-up on each side per call, on a local socket that needs
// no estimating. A stream (say a slow HTTP client's response) buffers at most
// WindowSize.
const (
	WindowSize     = 1 << 20
	ConnWindowSize = 4 << 20
)

// Protocol is the couchepi plugin protocol version negotiated by go-plugin.
const Protocol = 1

// PluginKey is the name under which the couchepi plugin is dispensed.
const PluginKey = "couchepi"

// Handshake is the go-plugin handshake shared by host and plugins: a plugin
// binary run by hand (without the cookie) says so and exits.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  Protocol,
	MagicCookieKey:   "COUCHEPI_PLUGIN",
	MagicCookieValue: "b5e0c6a1d1f34bb0a3c7e0a5f2d4c6e8",
}
