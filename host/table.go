package host

import (
	"strings"

	"github.com/couchepi/couchepi/hooks"
)

// dispatchTable is the precompiled, immutable view of every plugin's
// subscriptions and routes; it is swapped atomically when plugins change,
// so lookups on the write path take no lock and allocate nothing.
type dispatchTable struct {
	hooks  [numHooks][]hookEntry // per hook, in load order
	any    [numHooks]*dbMatcher  // per hook, every plugin's patterns; nil = none
	routes []routeEntry          // in load order
}

// numHooks is len(hooks.All()).
const numHooks = 6

// hookIndex maps a hook to its slot (its index in hooks.All()), -1 for an
// unknown hook.
func hookIndex(h hooks.Hook) int {
	switch h {
	case hooks.BeforeDocUpdate:
		return 0
	case hooks.AfterDocWrite:
		return 1
	case hooks.AfterDocRead:
		return 2
	case hooks.AfterDBCreate:
		return 3
	case hooks.AfterDBDelete:
		return 4
	case hooks.DBUpdated:
		return 5
	}
	return -1
}

// hookEntry is one plugin's subscription to one hook.
type hookEntry struct {
	m *managed
	dbMatcher
}

// dbMatcher matches db names against a plugin's patterns for one hook:
// exact names in a map, "*suffix" and "prefix*" patterns as string
// comparisons, anything else with hooks.MatchDB.
type dbMatcher struct {
	all      bool
	exact    map[string]struct{}
	suffixes []string
	prefixes []string
	patterns []string
	// lastByte/firstByte hold the last bytes of suffixes and first bytes of
	// prefixes: most unsubscribed names are ruled out by one byte.
	lastByte  [256]bool
	firstByte [256]bool
	// affixesOnly: only suffix and prefix patterns, so the byte tables
	// alone can rule a name out.
	affixesOnly bool
}

func (d *dbMatcher) add(pattern string) {
	switch {
	case pattern == "*":
		d.all = true
	case !strings.Contains(pattern, "*"):
		if d.exact == nil {
			d.exact = map[string]struct{}{}
		}
		d.exact[pattern] = struct{}{}
	case strings.LastIndex(pattern, "*") == 0:
		d.suffixes = append(d.suffixes, pattern[1:])
		d.lastByte[pattern[len(pattern)-1]] = true
	case strings.Index(pattern, "*") == len(pattern)-1:
		d.prefixes = append(d.prefixes, pattern[:len(pattern)-1])
		d.firstByte[pattern[0]] = true
	default:
		d.patterns = append(d.patterns, pattern)
	}
	d.affixesOnly = !d.all && d.exact == nil && len(d.patterns) == 0
}

func (d *dbMatcher) match(db string) bool {
	if db == "" {
		return d.all
	}
	if d.affixesOnly && !d.lastByte[db[len(db)-1]] && !d.firstByte[db[0]] {
		return false
	}
	return d.matchSlow(db)
}

func (d *dbMatcher) matchSlow(db string) bool {
	if d.all {
		return true
	}
	if d.exact != nil {
		if _, ok := d.exact[db]; ok {
			return true
		}
	}
	if d.lastByte[db[len(db)-1]] {
		for _, s := range d.suffixes {
			if strings.HasSuffix(db, s) {
				return true
			}
		}
	}
	if d.firstByte[db[0]] {
		for _, p := range d.prefixes {
			if strings.HasPrefix(db, p) {
				return true
			}
		}
	}
	for _, p := range d.patterns {
		if hooks.MatchDB(p, db) {
			return true
		}
	}
	return false
}

// routeEntry is one route of one plugin.
type routeEntry struct {
	m     *managed
	route hooks.Route
}

// rebuild recompiles the dispatch table from the plugins' current info.
func (h *Host) rebuild() {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := &dispatchTable{}
	for _, m := range h.plugins {
		m.mu.Lock()
		info := m.info
		m.mu.Unlock()
		var per [numHooks]*dbMatcher
		for _, s := range info.Subscriptions {
			i := hookIndex(s.Hook)
			if i < 0 {
				continue
			}
			if per[i] == nil {
				per[i] = &dbMatcher{}
			}
			per[i].add(s.DB)
		}
		for i, d := range per {
			if d != nil {
				t.hooks[i] = append(t.hooks[i], hookEntry{m: m, dbMatcher: *d})
			}
		}
		for _, s := range info.Subscriptions {
			if i := hookIndex(s.Hook); i >= 0 {
				if t.any[i] == nil {
					t.any[i] = &dbMatcher{}
				}
				t.any[i].add(s.DB)
			}
		}
		for _, r := range info.Routes {
			t.routes = append(t.routes, routeEntry{m: m, route: r})
		}
	}
	h.table.Store(t)
}

// Subscribed reports whether any loaded plugin subscribed to hook for db.
// It takes no lock and allocates nothing; a server may skip preparing a
// hook call when it returns false.
func (h *Host) Subscribed(hook hooks.Hook, db string) bool {
	i := hookIndex(hook)
	if i < 0 {
		return false
	}
	d := h.table.Load().any[i]
	if d == nil {
		return false
	}
	// The byte-table reject of match, inlined here for the common case.
	if d.affixesOnly && db != "" && !d.lastByte[db[len(db)-1]] && !d.firstByte[db[0]] {
		return false
	}
	return d.match(db)
}

// HasRoute reports whether a plugin serves method and path (the request's
// r.URL.EscapedPath()).
func (h *Host) HasRoute(method, path string) bool {
	return h.route(method, path) != nil
}

func (h *Host) route(method, path string) *managed {
	for _, r := range h.table.Load().routes {
		if r.route.Matches(method, path) {
			return r.m
		}
	}
	return nil
}
