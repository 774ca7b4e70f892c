package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// startClusterNode runs minicouch with the replicator on a job queue in
// etcd, with the given node types.
func startClusterNode(t *testing.T, endpoints []string, prefix string, frontend, replication bool, extra string) *couch {
	skipShort(t)
	data := t.TempDir()
	cfg := e2eConfig + "job_store = etcd\n" + extra +
		"[etcd]\nendpoints = " + strings.Join(endpoints, ",") + "\nprefix = " + prefix + "\n" +
		fmt.Sprintf("[node_types]\napi_frontend = %v\nreplication = %v\n", frontend, replication)
	s := minicouchtest.Start(t, minicouchtest.Options{
		Data: data, Config: cfg, Plugins: []string{minicouchtest.Replicator(t, "v1")},
	})
	c := &couch{t: t, s: s, addr: s.Addr}
	if frontend {
		c.waitUp()
	}
	return c
}

// TestE2EClusterOnEtcd (issue 13): one api_frontend-only and two
// replication-only minicouch share a job queue in a 3-member etcd. Jobs
// from _replicator docs and _replicate bodies written to the frontend run
// on both replication nodes within their max_jobs, every doc arrives, and
// the frontend's _scheduler/jobs shows each running job with its node.
func TestE2EClusterOnEtcd(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 3)
	prefix := fmt.Sprintf("e2e-%d/", time.Now().UnixNano())
	front := startClusterNode(t, etcdc.Endpoints(), prefix, true, false, "")
	workers := []*couch{
		startClusterNode(t, etcdc.Endpoints(), prefix, false, true, "max_jobs = 4\n"),
		startClusterNode(t, etcdc.Endpoints(), prefix, false, true, "max_jobs = 4\n"),
	}
	front.must("PUT", "/src", "", 201)
	front.putDocs("src", 0, 20)
	const continuous, oneShot, transient = 5, 3, 2
	for i := 0; i < continuous; i++ {
		front.must("PUT", fmt.Sprintf("/_replicator/c%d", i), front.repDoc("src", fmt.Sprintf("tc%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	for i := 0; i < oneShot; i++ {
		front.must("PUT", fmt.Sprintf("/_replicator/o%d", i), front.repDoc("src", fmt.Sprintf("to%d", i), `,"create_target":true`), 201)
	}
	for i := 0; i < transient; i++ {
		front.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true}`, front.endpoint("src"), front.endpoint(fmt.Sprintf("tr%d", i))), 202)
	}
	targets := []string{}
	for i := 0; i < continuous; i++ {
		targets = append(targets, fmt.Sprintf("tc%d", i))
	}
	for i := 0; i < oneShot; i++ {
		targets = append(targets, fmt.Sprintf("to%d", i))
	}
	for i := 0; i < transient; i++ {
		targets = append(targets, fmt.Sprintf("tr%d", i))
	}
	for _, tgt := range targets {
		front.eventually(tgt+" replicated", 60*time.Second, func() bool { return front.docCount(tgt) == 20 })
	}
	for i := 0; i < oneShot; i++ {
		front.waitState("_replicator", fmt.Sprintf("o%d", i), "completed", 30*time.Second)
	}

	// Every continuous job runs, on one of the two replication nodes, at
	// most max_jobs on each.
	nodes := map[string]bool{}
	for _, w := range workers {
		nodes["minicouch@"+w.addr] = true
	}
	var perNode map[string]int
	front.eventually("7 continuous jobs running on both nodes", 30*time.Second, func() bool {
		_, body := front.req("GET", "/_scheduler/jobs", "")
		var list struct {
			Jobs []struct {
				Node any `json:"node"`
				PID  any `json:"pid"`
			} `json:"jobs"`
		}
		json.Unmarshal([]byte(body), &list)
		perNode = map[string]int{}
		for _, j := range list.Jobs {
			if j.PID == nil {
				continue
			}
			n, _ := j.Node.(string)
			if !nodes[n] {
				t.Fatalf("job running on unknown node %q: %s", n, body)
			}
			perNode[n]++
		}
		return len(perNode) == 2 && perNode["minicouch@"+workers[0].addr]+perNode["minicouch@"+workers[1].addr] == continuous+transient
	})
	for n, count := range perNode {
		if count > 4 {
			t.Errorf("node %s runs %d jobs, over max_jobs 4", n, count)
		}
	}
	// New docs keep flowing.
	front.putDocs("src", 20, 5)
	for i := 0; i < continuous; i++ {
		tgt := fmt.Sprintf("tc%d", i)
		front.eventually(tgt+" caught up", 30*time.Second, func() bool { return front.docCount(tgt) == 25 })
	}
	t.Logf("jobs per node: %v", perNode)
}
