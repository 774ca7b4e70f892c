package host

import (
	"context"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	dto "github.com/prometheus/client_model/go"
)

// findMetric returns the value of the metric of family name whose labels
// include all of want, and whether it exists.
func findMetric(mfs []*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	h, srv := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	ctx := context.Background()
	srv.createDB("a_guarded")
	alice := hooks.UserCtx{Name: "alice", Roles: []string{}}
	if _, err := srv.put(ctx, "a_guarded", []byte(`{"_id":"ok1","type":"t","owner":"alice"}`), alice); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.put(ctx, "a_guarded", []byte(`{"_id":"ok2","type":"t","owner":"alice"}`), alice); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.put(ctx, "a_guarded", []byte(`{"_id":"bad"}`), alice); err == nil {
		t.Fatal("doc without type was accepted")
	}
	if err := h.Reload(ctx, "docguard", Spec{Path: docguardV2}); err != nil {
		t.Fatal(err)
	}

	mfs, err := h.Gatherer().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	bdu := string(hooks.BeforeDocUpdate)
	tests := []struct {
		name   string
		family string
		labels map[string]string
		want   func(float64) bool
	}{
		{"accepted writes", "couchepi_host_hook_calls_total", map[string]string{"hook": bdu, "plugin": "docguard", "result": "ok"}, func(v float64) bool { return v == 2 }},
		{"rejected write", "couchepi_host_hook_calls_total", map[string]string{"hook": bdu, "plugin": "docguard", "result": "rejected"}, func(v float64) bool { return v == 1 }},
		{"no 503s", "couchepi_host_hook_calls_total", map[string]string{"hook": bdu, "plugin": "docguard", "result": "unavailable"}, func(v float64) bool { return v == 0 }},
		{"latency observed per call", "couchepi_host_hook_duration_seconds", map[string]string{"hook": bdu, "plugin": "docguard"}, func(v float64) bool { return v == 3 }},
		{"events queued", "couchepi_host_events_queued_total", map[string]string{"plugin": "docguard"}, func(v float64) bool { return v >= 2 }},
		{"one reload", "couchepi_host_plugin_reloads_total", map[string]string{"plugin": "docguard", "result": "ok"}, func(v float64) bool { return v == 1 }},
		{"no restarts", "couchepi_host_plugin_restarts_total", map[string]string{"plugin": "docguard"}, func(v float64) bool { return v == 0 }},
		{"running", "couchepi_host_plugin_state", map[string]string{"plugin": "docguard", "state": string(StateRunning)}, func(v float64) bool { return v == 1 }},
		{"not failed", "couchepi_host_plugin_state", map[string]string{"plugin": "docguard", "state": string(StateFailed)}, func(v float64) bool { return v == 0 }},
		{"version after reload", "couchepi_host_plugin_info", map[string]string{"plugin": "docguard", "version": "v2"}, func(v float64) bool { return v == 1 }},
		// The new process has not validated any write yet: its own counter
		// may be absent; the plugin's metrics must carry the plugin label.
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := findMetric(mfs, tc.family, tc.labels)
			if !ok || !tc.want(v) {
				t.Fatalf("%s%v = %v (present %v)", tc.family, tc.labels, v, ok)
			}
		})
	}

	// A write through the new process shows up in the plugin's own metrics.
	if _, err := srv.put(ctx, "a_guarded", []byte(`{"_id":"ok3","type":"t","owner":"alice","created_at":"2026"}`), alice); err != nil {
		t.Fatal(err)
	}
	mfs, err = h.Gatherer().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	if v, ok := findMetric(mfs, "docguard_hook_calls_total", map[string]string{"plugin": "docguard", "hook": bdu, "db": "a_guarded"}); !ok || v < 1 {
		t.Fatalf("docguard_hook_calls_total{plugin=docguard} = %v (present %v)", v, ok)
	}
}

func TestAddPluginLabel(t *testing.T) {
	tests := []struct {
		name string
		in   []string // name=value pairs
		want []string
	}{
		{"no labels", nil, []string{"plugin=p"}},
		{"sorted in", []string{"a=1", "z=2"}, []string{"a=1", "plugin=p", "z=2"}},
		{"own plugin label kept as exported_plugin", []string{"plugin=mine"}, []string{"exported_plugin=mine", "plugin=p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &dto.Metric{}
			for _, kv := range tc.in {
				k, v, _ := cut(kv)
				m.Label = append(m.Label, &dto.LabelPair{Name: &k, Value: &v})
			}
			addPluginLabel(m, "p")
			var got []string
			for _, lp := range m.Label {
				got = append(got, lp.GetName()+"="+lp.GetValue())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("labels %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("labels %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func cut(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// BenchmarkHookMetrics is what instrumentation adds to one sync hook call.
func BenchmarkHookMetrics(b *testing.B) {
	mx := newMetrics(New(Config{}))
	hm := mx.forPlugin("p").hook(hooks.BeforeDocUpdate)
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hm.observe(resultOK, time.Since(start).Seconds())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/call")
}
