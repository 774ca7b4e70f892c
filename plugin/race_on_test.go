//go:build race

package main

// raceEnabled: the e2e tests build the plugin with -race too.
const raceEnabled = true
