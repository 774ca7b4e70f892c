package sdk

import (
	"context"
	"testing"

	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// counting is a plugin with one counter in its registry.
type counting struct {
	recorder
	reg *prometheus.Registry
}

func (c *counting) Metrics() prometheus.Gatherer { return c.reg }

// TestMetrics: the Metrics RPC carries the plugin's families, protobuf
// encoded; a plugin without metrics answers with none.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctr := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "things_total", Help: "things"}, []string{"kind"})
	reg.MustRegister(ctr)
	ctr.WithLabelValues("a").Add(3)
	cases := []struct {
		name string
		p    Plugin
		want map[string]float64 // family name -> value of its first metric
	}{
		{"no metrics", &recorder{}, map[string]float64{}},
		{"a counter", &counting{reg: reg}, map[string]float64{"things_total": 3}},
		{"nil gatherer", &nilGatherer{}, map[string]float64{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reply, err := newServer(tc.p, nil, nil).Metrics(context.Background(), &pb.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, raw := range reply.GetFamilies() {
				mf := &dto.MetricFamily{}
				if err := proto.Unmarshal(raw, mf); err != nil {
					t.Fatal(err)
				}
				got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
			}
			if len(got) != len(tc.want) {
				t.Fatalf("families %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("families %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// nilGatherer is a MetricsGatherer that has nothing to gather yet.
type nilGatherer struct{ recorder }

func (*nilGatherer) Metrics() prometheus.Gatherer { return nil }
