package park

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

// feed is the _db_updates feed of one remote server, read while the
// server has parked jobs.
type feed struct {
	cancel context.CancelFunc
}

// heartbeat is the _db_updates heartbeat asked for; the feed is
// reconnected when nothing arrives for three of them.
const heartbeat = 10 * time.Second

// startFeedLocked starts server's feed with the endpoint and settings of
// e (a job parked on it). Callers hold w.mu.
func (w *Waker) startFeedLocked(server string, e *entry) {
	ctx, cancel := context.WithCancel(w.ctx)
	w.feeds[server] = &feed{cancel: cancel}
	ep := e.ep
	ep.URL = rootURL(server)
	rep := e.rep.Clone()
	rep.ConnectionTimeout = int(3 * heartbeat / time.Millisecond)
	c := w.opts.Pool.Endpoint(ep, rep)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.readFeed(ctx, server, c, ep)
	}()
}

// readFeed follows server's _db_updates until ctx ends, reconnecting with
// backoff. Each (re)connection checks every job parked on the server,
// since updates made while disconnected were not seen. A server that
// refuses the feed (no admin rights, no _db_updates) gets its jobs woken
// and is not watchable for NoFeedFor.
func (w *Waker) readFeed(ctx context.Context, server string, c *couchclient.Client, ep parse.Endpoint) {
	wait := time.Second
	for ctx.Err() == nil {
		resp, err := c.Do(ctx, &couchclient.Request{Method: http.MethodGet, Path: "_db_updates", Feed: true, NoRetry: true,
			Query: "feed=continuous&since=now&timeout=" + strconv.Itoa(int(time.Hour/time.Millisecond)) + "&heartbeat=" + strconv.Itoa(int(heartbeat/time.Millisecond))})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, couchclient.ErrNotAllowed) {
				w.log.Info("a source server's _db_updates feed is not allowed by the host policy; its idle jobs keep running", "server", ep.RedactedURL())
				w.unwatchable(server)
				return
			}
			w.log.Debug("_db_updates feed failed; reconnecting", "server", ep.RedactedURL(), "error", err, "wait", wait.String())
			if couchclient.Sleep(ctx, couchclient.Jitter(wait)) != nil {
				return
			}
			wait = min(wait*2, time.Minute)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			couchclient.Release(resp)
			if resp.StatusCode/100 == 4 {
				w.log.Info("cannot read the _db_updates feed of a source server; its idle jobs keep running", "server", ep.RedactedURL(), "status", resp.StatusCode)
				w.unwatchable(server)
				return
			}
			if couchclient.Sleep(ctx, couchclient.Jitter(wait)) != nil {
				return
			}
			wait = min(wait*2, time.Minute)
			continue
		}
		wait = time.Second
		w.checkServer(server)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			var ev struct {
				DB   string `json:"db_name"`
				Type string `json:"type"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.DB == "" {
				continue // a heartbeat, or the end of the feed
			}
			w.wakeSource(source{server: server, db: ev.DB})
		}
		resp.Body.Close()
	}
}

// unwatchable marks a server as not watchable, wakes its parked jobs and
// sends its quiet jobs back to their own feeds.
func (w *Waker) unwatchable(server string) {
	w.mu.Lock()
	w.noFeed[server] = time.Now().Add(w.opts.NoFeedFor)
	delete(w.feeds, server)
	w.fireServerLocked(server, true)
	w.mu.Unlock()
	w.wakeServer(server)
}

// checkServer checks every job parked on server and signals every watch
// of it (their quiet jobs read what the feed may have missed).
func (w *Waker) checkServer(server string) {
	w.mu.Lock()
	w.fireServerLocked(server, false)
	w.mu.Unlock()
	for _, id := range w.serverJobs(server) {
		w.check(id)
	}
}
