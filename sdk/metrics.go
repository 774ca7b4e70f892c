package sdk

import (
	"context"

	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// MetricsGatherer is implemented by a plugin that exposes Prometheus
// metrics. The host gathers them at every scrape of the server's metrics
// endpoint and adds a "plugin" label (the plugin's name) to each metric,
// so plugins never collide with the server or each other. A
// *prometheus.Registry is the usual Gatherer to return.
type MetricsGatherer interface {
	Metrics() prometheus.Gatherer
}

// Metrics answers the host's Metrics call with the plugin's metric
// families, each protobuf-encoded; a plugin without metrics sends none.
func (s *server) Metrics(context.Context, *pb.Empty) (_ *pb.MetricsReply, err error) {
	defer s.recovered("metrics", &err)
	mg, ok := s.p.(MetricsGatherer)
	if !ok {
		return &pb.MetricsReply{}, nil
	}
	g := mg.Metrics()
	if g == nil {
		return &pb.MetricsReply{}, nil
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, wire.ToStatus(err)
	}
	if err != nil {
		// Partial results are still worth exposing.
		s.log.Warn("gathering plugin metrics", "error", err)
	}
	reply := &pb.MetricsReply{Families: make([][]byte, 0, len(mfs))}
	for _, mf := range mfs {
		b, err := proto.Marshal(mf)
		if err != nil {
			return nil, wire.ToStatus(err)
		}
		reply.Families = append(reply.Families, b)
	}
	return reply, nil
}
