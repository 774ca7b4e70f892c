package etcd_test

import (
	"os"
	"testing"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.ServeMember() // a member of a process cluster (TestMemberKilled) runs here
	os.Exit(m.Run())
}
