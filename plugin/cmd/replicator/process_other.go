//go:build !unix

package main

// processAlive cannot tell on this system: a previous process's lease is
// left to expire.
func processAlive(int) bool { return true }
