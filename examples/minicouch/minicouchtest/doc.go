// Package minicouchtest runs real minicouch servers for tests: it builds
// couchepi's binaries once per test process, starts minicouch as a process
// on a free 127.0.0.1 port with its own data directory (plugins, config and
// Fauxton optional), waits until it listens, and stops it when the test
// ends. It also restarts a server on the same data directory, kills it with
// SIGKILL, and sends JSON requests to it as the admin.
//
// A test package that uses it calls Main from TestMain so that the built
// binaries and the servers started with StartProcess are removed at the end:
//
//	func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }
package minicouchtest
