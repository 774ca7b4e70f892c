package replicate

import (
	"errors"
	"io"

	"github.com/couchepi/couchepi/internal/jsonscan"
)

// feedScanner reads a normal `_changes` response,
// {"results":[row,…],"last_seq":…,"pending":…}, as it streams in: rows are
// found with the scanner in jsonscan.go and decoded into changes without
// encoding/json (which scanned every row twice and decoded it by reflection).
type feedScanner struct {
	r   io.Reader
	buf []byte
	pos int
	eof bool
}

// feedChunk is how much is read at a time.
const feedChunk = 64 << 10

// fill reads more of the response, dropping what was consumed.
func (f *feedScanner) fill() error {
	if f.eof {
		return io.ErrUnexpectedEOF
	}
	if f.pos > 0 {
		n := copy(f.buf, f.buf[f.pos:])
		f.buf, f.pos = f.buf[:n], 0
	}
	if cap(f.buf)-len(f.buf) < feedChunk/2 {
		nb := make([]byte, len(f.buf), 2*cap(f.buf)+feedChunk)
		copy(nb, f.buf)
		f.buf = nb
	}
	n, err := f.r.Read(f.buf[len(f.buf):cap(f.buf)])
	f.buf = f.buf[:len(f.buf)+n]
	if err == io.EOF {
		f.eof = true
		return nil
	}
	return err
}

// token skips whitespace and returns the next byte without consuming it.
func (f *feedScanner) token() (byte, error) {
	for {
		f.pos = jsonscan.SkipSpace(f.buf, f.pos)
		if f.pos < len(f.buf) {
			return f.buf[f.pos], nil
		}
		if err := f.fill(); err != nil {
			return 0, err
		}
	}
}

// expect consumes the byte c (after whitespace).
func (f *feedScanner) expect(c byte) error {
	t, err := f.token()
	if err != nil {
		return err
	}
	if t != c {
		return errMalformed
	}
	f.pos++
	return nil
}

// value consumes the next JSON value and returns it; the slice is valid
// until the next call.
func (f *feedScanner) value() ([]byte, error) {
	if _, err := f.token(); err != nil {
		return nil, err
	}
	for {
		end, err := skipValue(f.buf, f.pos)
		// A value reaching the end of what has arrived may go on.
		if (err != nil || end == len(f.buf)) && !f.eof {
			if ferr := f.fill(); ferr != nil {
				return nil, ferr
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		v := f.buf[f.pos:end]
		f.pos = end
		return v, nil
	}
}

// rows calls fn with each row of the feed's results, then reads the rest.
func (f *feedScanner) rows(fn func(c change) error) error {
	if empty, err := f.open('{', '}'); err != nil || empty {
		return err
	}
	for {
		k, err := f.value()
		if err != nil {
			return err
		}
		if len(k) == 0 || k[0] != '"' {
			return errMalformed
		}
		key, err := jsonscan.Unquote(k)
		if err != nil {
			return err
		}
		if err := f.expect(':'); err != nil {
			return err
		}
		if key == "results" {
			if err := f.results(fn); err != nil {
				return err
			}
		} else if _, err := f.value(); err != nil {
			return err
		}
		if done, err := f.next('}'); err != nil || done {
			return err
		}
	}
}

// results reads the results array.
func (f *feedScanner) results(fn func(c change) error) error {
	if empty, err := f.open('[', ']'); err != nil || empty {
		return err
	}
	for {
		row, err := f.value()
		if err != nil {
			return err
		}
		c, err := parseChangeRow(row)
		if err != nil {
			return err
		}
		if err := fn(c); err != nil {
			return err
		}
		if done, err := f.next(']'); err != nil || done {
			return err
		}
	}
}

// open consumes the opening bracket of an object or array and, when the
// container is empty, its closing one; empty reports that case.
func (f *feedScanner) open(open, close byte) (empty bool, err error) {
	if err := f.expect(open); err != nil {
		return false, err
	}
	t, err := f.token()
	if err != nil || t != close {
		return false, err
	}
	f.pos++
	return true, nil
}

// next consumes the separator after a member or element: ',' (more follow)
// or close (done); anything else is malformed.
func (f *feedScanner) next(close byte) (done bool, err error) {
	t, err := f.token()
	if err != nil {
		return false, err
	}
	f.pos++
	switch t {
	case ',':
		return false, nil
	case close:
		return true, nil
	}
	return false, errMalformed
}

// errRowNotObject is the error for a changes row that is not an object.
var errRowNotObject = errors.New("invalid _changes row")

// parseChangeRow decodes one row: seq (kept raw, copied), id, the revs of
// changes, and deleted. Other members are ignored.
func parseChangeRow(row []byte) (change, error) {
	var c change
	if len(row) == 0 || row[0] != '{' {
		return c, errRowNotObject
	}
	_, err := members(row, 0, func(key []byte, v int) (int, error) {
		end, err := skipValue(row, v)
		if err != nil {
			return 0, err
		}
		val := row[v:end]
		switch string(key) {
		case "seq":
			c.Seq = append([]byte(nil), val...)
		case "id":
			if val[0] == '"' {
				if c.ID, err = jsonscan.Unquote(val); err != nil {
					return 0, err
				}
			}
		case "deleted":
			c.Deleted = string(val) == "true"
		case "changes":
			if val[0] != '[' {
				break
			}
			c.Changes = c.Changes[:0]
			_, err = elements(val, 0, func(e int) (int, error) {
				var rev string
				end, err := members(val, e, func(key []byte, v int) (int, error) {
					end, err := skipValue(val, v)
					if err == nil && string(key) == "rev" && val[v] == '"' {
						rev, err = jsonscan.Unquote(val[v:end])
					}
					return end, err
				})
				c.Changes = append(c.Changes, struct {
					Rev string `json:"rev"`
				}{rev})
				return end, err
			})
			if err != nil {
				return 0, err
			}
		}
		return end, nil
	})
	return c, err
}
