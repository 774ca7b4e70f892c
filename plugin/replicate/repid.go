package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

// ComputeRepID returns the replication id of rep. For a user filter
// ("ddoc/name") it fetches the filter's source from `{source}_design/ddoc`
// because its code is part of the id.
func ComputeRepID(ctx context.Context, rep *parse.Rep, serverUUID string, pool *couchclient.Pool) (parse.RepID, error) {
	code := ""
	if ddocID, name, ok := parse.FilterDDoc(rep.Filter); ok {
		if pool == nil {
			pool = couchclient.NewPool(couchclient.PoolOptions{})
			defer pool.Close()
		}
		var err error
		code, err = fetchFilterCode(ctx, pool.Endpoint(rep.Source, rep), ddocID, name)
		if err != nil {
			return parse.RepID{}, err
		}
	}
	return parse.ReplicationID(rep, serverUUID, code), nil
}

// fetchFilterCode reads filters.<name> of design doc ddocID ("_design/x")
// from the source.
func fetchFilterCode(ctx context.Context, src *couchclient.Client, ddocID, name string) (string, error) {
	path := "_design/" + url.PathEscape(strings.TrimPrefix(ddocID, "_design/"))
	fail := func(why string) error {
		return newError("filter_fetch_error", fmt.Sprintf("Couldn't open document `%s` from source database `%s`: %s", ddocID, src.RedactedURL(), why), true)
	}
	resp, err := src.Do(ctx, &couchclient.Request{Buffer: true, Method: http.MethodGet, Path: path})
	if err != nil {
		return "", fail(asError(err).Reason)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fail(statusError("", resp, "GET", src.RedactedURL()+path).Reason)
	}
	var doc struct {
		Filters map[string]json.RawMessage `json:"filters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return "", fail(err.Error())
	}
	var code string
	if raw, ok := doc.Filters[name]; !ok || json.Unmarshal(raw, &code) != nil {
		return "", newError("filter_fetch_error", fmt.Sprintf("Could not find filter function `%s` in design document `%s` of source database `%s`", name, ddocID, src.RedactedURL()), true)
	}
	return strings.TrimSpace(code), nil
}
