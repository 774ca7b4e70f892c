package docguard

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// auditLog remembers, per db, the docs seen written and the last seq
// processed. With a state file it survives restarts: every record is one
// appended line "db\tid\tseq", replayed at open.
type auditLog struct {
	f    *os.File
	docs map[string]map[string]bool
	seqs map[string]string
}

func openAudit(path string) (*auditLog, error) {
	a := &auditLog{docs: map[string]map[string]bool{}, seqs: map[string]string{}}
	if path == "" {
		return a, nil
	}
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(sc.Text(), "\t")
			switch {
			case len(parts) == 3:
				a.apply(parts[0], parts[1], parts[2])
			case len(parts) == 2 && parts[1] == "-":
				delete(a.docs, parts[0])
				delete(a.seqs, parts[0])
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read audit log %s: %w", path, err)
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	a.f = f
	return a, nil
}

func (a *auditLog) apply(db, id, seq string) {
	ids := a.docs[db]
	if ids == nil {
		ids = map[string]bool{}
		a.docs[db] = ids
	}
	ids[id] = true
	if seq != "" {
		a.seqs[db] = seq
	}
}

func (a *auditLog) record(db, id, seq string) error {
	a.apply(db, id, seq)
	if a.f == nil {
		return nil
	}
	_, err := fmt.Fprintf(a.f, "%s\t%s\t%s\n", db, id, seq)
	return err
}

func (a *auditLog) forget(db string) error {
	delete(a.docs, db)
	delete(a.seqs, db)
	if a.f == nil {
		return nil
	}
	_, err := fmt.Fprintf(a.f, "%s\t-\n", db)
	return err
}

func (a *auditLog) lastSeq(db string) string { return a.seqs[db] }

func (a *auditLog) close() error {
	if a.f == nil {
		return nil
	}
	return a.f.Close()
}
