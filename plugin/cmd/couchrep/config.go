package main

import (
	"gopkg.in/ini.v1"

	"github.com/couchepi/couchepi/parse"
)

// replicatorConfig reads the `[replicator]` section of a CouchDB-style ini
// file (local.ini, or one written for couchrep) as the server's replicator
// would. Unlike the server, which logs a bad value and keeps its default,
// couchrep refuses it: a one-off command should not run with settings its
// user did not ask for.
func replicatorConfig(path string) (parse.Options, error) {
	f, err := ini.Load(path) // read as minicouch reads its --config

	if err != nil {
		return parse.Options{}, err
	}
	section := map[string]string{}
	if s, err := f.GetSection("replicator"); err == nil {
		for _, k := range s.Keys() {
			section[k.Name()] = k.Value()
		}
	}
	return parse.OptionsFromConfig(section)
}
