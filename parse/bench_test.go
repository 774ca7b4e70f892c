package parse

import (
	"testing"
)

// benchDoc is a typical `_replicator` document: credentials in the URL,
// an object endpoint with headers, a selector and a few options.
var benchDoc = []byte(`{"_id":"rep-0001","source":"https://admin:secret@db.example.com:6984/orders",` +
	`"target":{"url":"http://127.0.0.1:5984/orders_copy","headers":{"X-Tenant":"acme","Authorization":"Basic YWRtaW46cGFzcw=="}},` +
	`"continuous":true,"create_target":true,"selector":{"type":"order","total":{"$gt":100}},` +
	`"worker_processes":2,"checkpoint_interval":10000,"comment":"nightly"}`)

// BenchmarkParseValidate measures the write-time path of a replicator doc
// (owner handling + full parse), what before_doc_update costs per write.
func BenchmarkParseValidate(b *testing.B) {
	b.ReportAllocs()
	user := UserCtx{Name: "admin", Roles: []string{"_admin"}}
	for b.Loop() {
		if _, err := BeforeDocUpdate(benchDoc, user); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "docs/s")
}

// BenchmarkReplicationID measures parse + replication id of the same doc.
func BenchmarkReplicationID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		rep, err := ReplicationDoc(benchDoc, UserCtx{}, DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		_ = ReplicationID(rep, "0c0fac2e70fb207e53d88d454146c261", "")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}
