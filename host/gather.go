package host

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// PluginLabel is the label the host adds to every metric a plugin exposes,
// valued with the plugin's name. A plugin's own label of that name is
// renamed "exported_plugin".
const PluginLabel = "plugin"

// Gatherer returns the host's metrics (hook calls and latency, event
// queues, restarts, reloads, plugin states) merged with the metrics every
// live plugin exposes through sdk.MetricsGatherer, each plugin metric
// labelled plugin="<name>". A server registers it next to its own
// collectors, e.g. prometheus.Gatherers{serverRegistry, h.Gatherer()}.
// Plugins are asked at every Gather, each within HookTimeout; a plugin that
// fails is left out of that scrape and the error is reported.
func (h *Host) Gatherer() prometheus.Gatherer {
	return prometheus.Gatherers{h.mx.reg, pluginsGatherer{h}}
}

// pluginsGatherer gathers the metric families of every live plugin.
type pluginsGatherer struct{ h *Host }

// Gather asks each live plugin for its metrics and labels them.
func (g pluginsGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.h.mu.Lock()
	ms := append([]*managed(nil), g.h.plugins...)
	g.h.mu.Unlock()
	var out []*dto.MetricFamily
	var errs []error
	for _, m := range ms {
		inst := m.cur.Load()
		if inst == nil {
			continue
		}
		mfs, err := gatherPlugin(inst, m.name, g.h.cfg.HookTimeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: metrics: %w", m.name, err))
			continue
		}
		out = append(out, mfs...)
	}
	return out, errors.Join(errs...)
}

// gatherPlugin calls the Metrics RPC of one process. A plugin built
// before the RPC existed has no metrics, which is not an error.
func gatherPlugin(inst *instance, name string, timeout time.Duration) ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	reply, err := inst.rpc.Metrics(ctx, &pb.Empty{})
	if status.Code(err) == codes.Unimplemented {
		return nil, nil
	}
	if err != nil {
		return nil, wire.Err(err)
	}
	out := make([]*dto.MetricFamily, 0, len(reply.GetFamilies()))
	for _, raw := range reply.GetFamilies() {
		mf := &dto.MetricFamily{}
		if err := proto.Unmarshal(raw, mf); err != nil {
			return nil, fmt.Errorf("decode metric family: %w", err)
		}
		for _, metric := range mf.GetMetric() {
			addPluginLabel(metric, name)
		}
		out = append(out, mf)
	}
	return out, nil
}

// addPluginLabel labels metric with the plugin's name, keeping the labels
// sorted by name as the exposition requires.
func addPluginLabel(metric *dto.Metric, name string) {
	for _, lp := range metric.Label {
		if lp.GetName() == PluginLabel {
			lp.Name = proto.String("exported_" + PluginLabel)
		}
	}
	metric.Label = append(metric.Label, &dto.LabelPair{Name: proto.String(PluginLabel), Value: proto.String(name)})
	sort.Slice(metric.Label, func(i, j int) bool { return metric.Label[i].GetName() < metric.Label[j].GetName() })
}
