package parse_test

import (
	"errors"
	"fmt"

	"github.com/couchepi/couchepi/parse"
)

func Example() {
	body := []byte(`{
		"source": "http://admin:secret@127.0.0.1:5984/orders",
		"target": {"url": "https://backup.example.com/orders", "headers": {"X-Tenant": "acme"}},
		"continuous": true,
		"worker_processes": "2"
	}`)
	rep, err := parse.ReplicationDoc(body, parse.UserCtx{Name: "admin", Roles: []string{"_admin"}}, parse.DefaultOptions())
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	fmt.Println(rep.Source.URL, rep.Source.Auth.Username, rep.Target.URL, rep.WorkerProcesses)
	fmt.Println(parse.RedactURL("http://admin:secret@127.0.0.1:5984/orders/"))
	fmt.Println(parse.ReplicationID(rep, "0c0fac2e70fb207e53d88d454146c261", "").Ext)

	_, err = parse.ReplicationDoc([]byte(`{"source":"http://h/a","target":"http://h/b","continuous":"yes"}`), parse.UserCtx{}, parse.DefaultOptions())
	var pe *parse.Error
	if errors.As(err, &pe) {
		fmt.Println("403 forbidden:", pe.Reason)
	}
	// Output:
	// http://127.0.0.1:5984/orders/ admin https://backup.example.com/orders/ 2
	// http://admin:*****@127.0.0.1:5984/orders/
	// +continuous
	// 403 forbidden: `continuous` must be a boolean
}
