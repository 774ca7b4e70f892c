package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestE2EFairShare: with 2 slots, a replicator db with 12 continuous docs
// does not starve one with 2 (fair share picks which pending job starts),
// and raising the busy db's shares at runtime moves slots to it.
func TestE2EFairShare(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "max_jobs = 2\nmax_churn = 2\n")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 5)
	c.must("PUT", "/big%2F_replicator", "", 201)
	c.must("PUT", "/small%2F_replicator", "", 201)
	for i := 0; i < 12; i++ {
		c.must("PUT", fmt.Sprintf("/big%%2F_replicator/r%d", i), c.repDoc("src", fmt.Sprintf("big%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	// The busy db's jobs take the slots first.
	c.eventually("big/_replicator running", 20*time.Second, func() bool { return running(c)["big/_replicator"] > 0 })
	for i := 0; i < 2; i++ {
		c.must("PUT", fmt.Sprintf("/small%%2F_replicator/r%d", i), c.repDoc("src", fmt.Sprintf("small%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	equal := sampleShare(c, 6*time.Second)
	t.Logf("equal shares: small/_replicator held %.2f of the running slots", equal)
	if equal < 0.3 {
		t.Fatalf("equal shares: small/_replicator held %.2f of the running slots, want about half", equal)
	}
	c.must("PUT", "/_node/_local/_config/replicator.shares/big%2F_replicator", `"1000"`, 200)
	// Usage halves every cycle (1 s): within a few cycles small holds clearly fewer slots.
	var skewed float64
	c.eventually("small/_replicator to yield slots", 30*time.Second, func() bool {
		skewed = sampleShare(c, 3*time.Second)
		t.Logf("big/_replicator with 1000 shares: small/_replicator held %.2f of the running slots", skewed)
		return skewed < 0.7*equal
	})
}

// running counts the running jobs of each replicator db.
func running(c *couch) map[string]int {
	body := c.must("GET", "/_scheduler/jobs?states=running&limit=1000", "", 200)
	out := map[string]int{}
	for _, db := range []string{"big/_replicator", "small/_replicator"} {
		out[db] = strings.Count(body, `"database":"`+db+`"`)
	}
	return out
}

// sampleShare samples the running jobs for d and returns the fraction of
// running job samples that belonged to small/_replicator.
func sampleShare(c *couch, d time.Duration) float64 {
	small, total := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		r := running(c)
		small += r["small/_replicator"]
		total += r["small/_replicator"] + r["big/_replicator"]
	}
	if total == 0 {
		c.t.Fatal("no job ran")
	}
	return float64(small) / float64(total)
}
