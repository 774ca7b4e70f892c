package docs

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docCommand is one command of a page, from a fenced shell block or an
// inline code span: what a reader would type, with `\` continuations
// joined, a trailing comment and a `$ ` prompt dropped.
type docCommand struct {
	page   string // "README.md", "cluster.md", …
	line   int    // where it starts
	dir    string // the directory it runs in, relative to the repository, after the block's `cd`s
	text   string
	output string // the lines a `$ ` prompt block shows after it
	bg     bool   // it ended with `&`
	inline bool   // a code span of the text, not a line of a block
}

func (c docCommand) String() string { return c.page + ":" + strconv.Itoa(c.line) + ": " + c.text }

// words returns the command's words as sh splits them, after the
// VAR=value assignments before it.
func (c docCommand) words() (env, words []string) {
	words, _, _ = shellWords(c.text)
	for len(words) > 0 && envAssign.MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	return env, words
}

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// shellLangs are the info strings of the fenced blocks whose every line is
// a command; any other block holds commands only on `$ ` lines.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// docPages returns the paths of the pages whose commands are checked:
// every page of this directory and the README.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil || len(pages) < 5 {
		t.Fatalf("found pages %v: %v", pages, err)
	}
	return append(pages, filepath.Join("..", "README.md"))
}

// allCommands returns the commands of every page, in page order.
func allCommands(t *testing.T) []docCommand {
	t.Helper()
	var all []docCommand
	for _, p := range docPages(t) {
		all = append(all, pageCommands(t, p)...)
	}
	return all
}

// pageCommands returns the commands of one page: those of its fenced
// blocks, then those of its inline code spans.
func pageCommands(t *testing.T, file string) []docCommand {
	t.Helper()
	var cmds []docCommand
	var block, prose []string
	inBlock, shell, start := false, false, 0
	for i, line := range strings.Split(readPage(t, file), "\n") {
		fence := strings.TrimSpace(line)
		prose = append(prose, "")
		switch {
		case strings.HasPrefix(fence, "```") && !inBlock:
			inBlock, shell, start, block = true, shellLangs[strings.TrimPrefix(fence, "```")], i+2, nil
		case strings.HasPrefix(fence, "```"):
			inBlock = false
			b := blockParser{page: filepath.Base(file), dir: "."}
			cmds = append(cmds, b.parse(t, block, start, shell)...)
		case inBlock:
			block = append(block, line)
		default:
			prose[i] = line
		}
	}
	return append(cmds, inlineCommands(filepath.Base(file), strings.Join(prose, "\n"))...)
}

// codeSpan matches an inline code span of a page's text.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// inlineCommands returns the code spans of a page's text (its blocks
// blanked) that run a program commandChecks knows, with an argument: a
// command named in a sentence is checked as one in a block is, but not
// run (it is not one of a sequence).
func inlineCommands(page, prose string) []docCommand {
	var cmds []docCommand
	for _, m := range codeSpan.FindAllStringSubmatchIndex(prose, -1) {
		c := docCommand{
			page: page, line: 1 + strings.Count(prose[:m[0]], "\n"), dir: ".", inline: true,
			text: strings.Join(strings.Fields(prose[m[2]:m[3]]), " "),
		}
		if _, w := c.words(); len(w) > 1 && kindOf(c) != nil {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// blockParser turns the lines of one fenced block into commands, following
// its `cd`s.
type blockParser struct {
	page string
	dir  string
	cmds []docCommand
}

// parse reads a block whose first line is line number first. In a block
// with `$ ` prompts only prompted lines are commands, and the lines up to
// the next prompt are the output the page shows; in a shell block without
// prompts every line is one; other blocks have none.
func (b *blockParser) parse(t *testing.T, lines []string, first int, shell bool) []docCommand {
	t.Helper()
	prompted := false
	for _, l := range lines {
		prompted = prompted || strings.HasPrefix(strings.TrimLeft(l, " "), "$ ")
	}
	if !shell && !prompted {
		return nil
	}
	text, from := "", 0
	for i, l := range lines {
		prompt, isPrompt := strings.CutPrefix(strings.TrimLeft(l, " "), "$ ")
		switch {
		case text != "":
			text += l
		case prompted && isPrompt:
			text, from = prompt, first+i
		case prompted:
			if n := len(b.cmds); n > 0 {
				b.cmds[n-1].output += l + "\n"
			}
			continue
		default:
			text, from = l, first+i
		}
		if strings.HasSuffix(text, `\`) {
			text = strings.TrimSuffix(text, `\`) + " "
			continue
		}
		if _, _, open := shellWords(text); open {
			text += "\n"
			continue
		}
		_, code, _ := shellWords(text)
		b.add(code, from)
		text = ""
	}
	if text != "" {
		t.Errorf("%s:%d: the block ends inside a command: %s", b.page, from, text)
	}
	return b.cmds
}

// add adds one command line, split at `&&`; a `( … )` subshell keeps its
// `cd` to itself.
func (b *blockParser) add(code string, line int) {
	code = strings.TrimSpace(code)
	if code == "" {
		return
	}
	dir := b.dir
	sub := strings.HasPrefix(code, "(") && strings.HasSuffix(code, ")")
	if sub {
		code = code[1 : len(code)-1]
	}
	for _, part := range strings.Split(code, " && ") {
		c := docCommand{page: b.page, line: line, dir: dir, text: strings.TrimSpace(part)}
		if s, ok := strings.CutSuffix(c.text, " &"); ok {
			c.text, c.bg = s, true
		}
		b.cmds = append(b.cmds, c)
		if _, w := c.words(); len(w) == 2 && w[0] == "cd" {
			dir = path.Join(dir, w[1])
		}
	}
	if !sub {
		b.dir = dir
	}
}

// shellWords splits a line into words as sh does (quotes, backslashes) up
// to a `#` comment; code is the line without the comment, and open reports
// a quote left open, so that the command goes on on the next line.
func shellWords(s string) (words []string, code string, open bool) {
	var w strings.Builder
	in := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			w.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			in = true
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words, in = append(words, w.String()), false
				w.Reset()
			}
		case c == '#' && !in:
			return words, s[:i], false
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words, s, quote != 0
}

// TestDocCommandsExtracted pins the extraction on the shapes the pages
// use, so that a command cannot slip past the other tests unseen.
func TestDocCommandsExtracted(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.md")
	page := "```sh\n" +
		"cd examples/greeter\n" +
		"go build -o ../../bin/greeter .   # a comment\n" +
		"cd ../..\n" +
		"(cd a && make b)\n" +
		"curl -X PUT http://h/x \\\n     -d '{\"a\":\n  \"b # c\"}'\n" +
		"# only a comment\n" +
		"bin/minicouch --data d &\n" +
		"```\n\n```go\nfmt.Println()\n```\n\n```\n$ couchrep x\nan error\n```\n" +
		"Then `make\nbuild`, `go vet`, for `curl` habits, `see this`.\n"
	if err := os.WriteFile(file, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range pageCommands(t, file) {
		got = append(got, strconv.Itoa(c.line)+" "+c.dir+" "+c.text+" |"+c.output+"|"+strconv.FormatBool(c.bg))
	}
	want := []string{
		"2 . cd examples/greeter ||false",
		"3 examples/greeter go build -o ../../bin/greeter . ||false",
		"4 examples/greeter cd ../.. ||false",
		"5 . cd a ||false",
		"5 a make b ||false",
		"6 . curl -X PUT http://h/x       -d '{\"a\":\n  \"b # c\"}' ||false",
		"10 . bin/minicouch --data d ||true",
		"18 . couchrep x |an error\n|false",
		"21 . make build ||false",
		"22 . go vet ||false",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("extracted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// commandCheck is how one kind of documented command is checked without
// running it: a check reports (t.Errorf) what in the command is not true of
// the repository. page is the page's commands, for checks that look at the
// commands before.
type commandCheck struct {
	kind  string
	match func(words []string) bool
	check func(t *testing.T, c docCommand, words []string, page []docCommand)
}

// commandChecks are the kinds of command the pages may show. A command of
// none of them fails TestDocCommandsChecked: a new kind needs a check here.
var commandChecks = []commandCheck{
	{"curl", program("curl"), checkCurl},
	{"make", program("make"), checkMake},
	{"go", func(w []string) bool { return len(w) > 1 && w[0] == "go" }, checkGo},
	{"minicouch", program("bin/minicouch", "./bin/minicouch"), checkMinicouch},
	{"couchrep", program("couchrep", "bin/couchrep", "./bin/couchrep"), checkCouchrep},
	{"cd", program("cd"), checkCd},
	{"script", isScript, checkScript},
	{"sha256sum", program("sha256sum"), checkBuilt},
	{"git clone", isGitClone, checkClone},
}

// program matches a command run as one of names.
func program(names ...string) func([]string) bool {
	return func(w []string) bool {
		for _, n := range names {
			if len(w) > 0 && w[0] == n {
				return true
			}
		}
		return false
	}
}

// kindOf returns the check of a command's kind, or nil.
func kindOf(c docCommand) *commandCheck {
	_, w := c.words()
	for i := range commandChecks {
		if commandChecks[i].match(w) {
			return &commandChecks[i]
		}
	}
	return nil
}

// TestDocCommandsChecked: every command of every page's fenced shell
// blocks is of a kind this package checks, and passes its kind's check;
// every variable set before a command is one testing.md documents.
func TestDocCommandsChecked(t *testing.T) {
	cmds := allCommands(t)
	if len(cmds) < 40 {
		t.Fatalf("found only %d commands in the pages", len(cmds))
	}
	testingDoc := readPage(t, "testing.md")
	byPage := map[string][]docCommand{}
	for _, c := range cmds {
		byPage[c.page] = append(byPage[c.page], c)
	}
	for _, c := range cmds {
		env, w := c.words()
		for _, e := range env {
			if name, _, _ := strings.Cut(e, "="); !strings.Contains(testingDoc, "`"+name+"=") {
				t.Errorf("%s: sets %s, which testing.md does not document", c, name)
			}
		}
		k := kindOf(c)
		if k == nil {
			t.Errorf("%s: no test knows how to check this command (add its kind to commandChecks)", c)
			continue
		}
		k.check(t, c, w, byPage[c.page])
	}
}

// docAddr is the address every documented curl talks to; the live tests
// put their server's address in its place.
const docAddr = "127.0.0.1:5984"

// checkCurl: every URL of the command is on docAddr, so that running it
// against a test server needs only the address replaced.
func checkCurl(t *testing.T, c docCommand, _ []string, _ []docCommand) {
	for _, m := range regexp.MustCompile(`https?://(?:[^@/\s'"]*@)?([^/\s'"]+)`).FindAllStringSubmatch(c.text, -1) {
		if m[1] != docAddr {
			t.Errorf("%s: talks to %s, not %s", c, m[1], docAddr)
		}
	}
}

// checkMake: the targets named are the Makefile's; they are not run (most
// start servers or take minutes).
func checkMake(t *testing.T, c docCommand, w []string, _ []docCommand) {
	targets := makeTargets(t)
	if len(w) < 2 {
		t.Errorf("%s: names no target", c)
	}
	for _, target := range w[1:] {
		if !envAssign.MatchString(target) && !targets[target] {
			t.Errorf("%s: the Makefile has no target %s", c, target)
		}
	}
}

// goFlags are the go command's flags the pages may use: true for those
// that take a value.
var goFlags = map[string]bool{
	"run": true, "bench": true, "benchtime": true, "timeout": true, "tags": true, "o": true, "ldflags": true,
	"count": true, "fuzz": true, "fuzztime": true, "cpu": true, "p": true, "v": false, "race": false, "short": false,
}

// goSubcommands are the go subcommands the pages use: true for those whose
// packages and flags are checked; the others name the reader's directories
// (go work init ./myplugin) or a tool's arguments.
var goSubcommands = map[string]bool{"build": true, "test": true, "run": true, "vet": true, "doc": false, "work": false, "tool": false}

// checkGo: `go build|test|run|vet` names packages that exist, flags the go
// command has, and -run/-bench patterns that select at least one function
// of those packages. Nothing is built or run: TestStandalonePlugin builds
// the plugin of plugins.md, the live tests build couchrep, and the tests
// named are other packages' (or need a CouchDB or FoundationDB). A span
// such as `go vet` in a sentence names the tool and is not checked further.
func checkGo(t *testing.T, c docCommand, w []string, _ []docCommand) {
	checked, ok := goSubcommands[w[1]]
	if !ok {
		t.Errorf("%s: go %s is not a subcommand the pages may use (see goSubcommands)", c, w[1])
	}
	if !checked || c.inline && len(w) == 2 {
		return
	}
	patterns := map[string]string{}
	var pkgs []string
	for i := 2; i < len(w); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(w[i], "-"), "=")
		if !strings.HasPrefix(w[i], "-") {
			pkgs = append(pkgs, w[i])
			continue
		}
		takes, ok := goFlags[name]
		if !ok {
			t.Errorf("%s: -%s is not a flag the go command has (or add it to goFlags)", c, name)
			continue
		}
		if takes && !hasVal && i+1 < len(w) {
			i++
			val = w[i]
		}
		patterns[name] = val
	}
	if len(pkgs) == 0 {
		t.Errorf("%s: names no package", c)
	}
	var funcs []string
	for _, p := range pkgs {
		dir := filepath.Join("..", c.dir, strings.TrimSuffix(p, "/..."))
		goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		if len(goFiles) == 0 && !strings.HasSuffix(p, "/...") {
			t.Errorf("%s: %s is not a package of the repository", c, p)
		}
		funcs = append(funcs, testFuncs(t, dir, strings.HasSuffix(p, "/..."))...)
	}
	for flag, prefix := range map[string]string{"run": "Test|Fuzz|Example", "bench": "Benchmark"} {
		if pat, ok := patterns[flag]; ok && pat != "^$" && !selectsOne(pat, prefix, funcs) {
			t.Errorf("%s: -%s %s selects no %s function of %v", c, flag, pat, prefix, pkgs)
		}
	}
}

// testFuncs returns the Test, Benchmark, Fuzz and Example functions of the
// _test.go files in dir (and below it when all).
func testFuncs(t *testing.T, dir string, all bool) []string {
	t.Helper()
	var funcs []string
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir && (!all || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		for _, m := range decl.FindAllStringSubmatch(readPage(t, p), -1) {
			funcs = append(funcs, m[1])
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return funcs
}

// selectsOne reports whether the -run or -bench pattern pat picks one of
// funcs whose name starts with one of prefix ("A|B"); a pattern's first
// `/` element is matched against top-level names, as the go command does.
func selectsOne(pat, prefix string, funcs []string) bool {
	re, err := regexp.Compile(strings.Split(pat, "/")[0])
	if err != nil {
		return false
	}
	kinds := regexp.MustCompile("^(?:" + prefix + ")")
	for _, f := range funcs {
		if kinds.MatchString(f) && re.MatchString(f) {
			return true
		}
	}
	return false
}

// checkFlags: every --flag of the command is in the page's flag tables (which
// TestMinicouchFlags and couchrep's TestDocsAndHelpListEveryFlag keep equal
// to the flags the program defines).
func checkFlags(t *testing.T, c docCommand, w []string, page, heading string) {
	text := readPage(t, page)
	if heading != "" {
		text = section(t, text, heading)
	}
	known := map[string]bool{"help": true, "h": true}
	for _, f := range flagRows(text) {
		known[f] = true
	}
	for _, arg := range w[1:] {
		if name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "="); strings.HasPrefix(arg, "-") && !known[name] {
			t.Errorf("%s: %s is not a flag in %s", c, arg, page)
		}
	}
}

// checkMinicouch: the flags are minicouch's. The server itself is what the
// live tests start (minicouchtest), with the page's plugins.
func checkMinicouch(t *testing.T, c docCommand, w []string, _ []docCommand) {
	checkFlags(t, c, w, "minicouch.md", "Flags")
}

// checkCouchrep: the flags are couchrep's; TestDocCommandsRun runs the
// commands it can.
func checkCouchrep(t *testing.T, c docCommand, w []string, _ []docCommand) {
	checkFlags(t, c, w, "couchrep.md", "")
}

// checkCd: the directory is the repository's.
func checkCd(t *testing.T, c docCommand, w []string, _ []docCommand) {
	if len(w) != 2 {
		t.Errorf("%s: cd takes one directory", c)
		return
	}
	if fi, err := os.Stat(filepath.Join("..", c.dir, w[1])); err != nil || !fi.IsDir() {
		t.Errorf("%s: %s is not a directory of the repository", c, w[1])
	}
}

// isScript matches a command that runs a script of the repository.
func isScript(w []string) bool {
	return len(w) > 0 && strings.Contains(w[0], "/") && strings.HasSuffix(w[0], ".sh")
}

// scriptArg matches a script's required positional parameter, ${N:?…}.
var scriptArg = regexp.MustCompile(`\$\{(\d):\?`)

// checkScript: the script exists, is executable, parses (sh -n or bash -n,
// by its #! line) and is given every argument it requires. It is not run:
// the pages' scripts fetch from npm or run PouchDB's suites.
func checkScript(t *testing.T, c docCommand, w []string, _ []docCommand) {
	file := filepath.Join("..", c.dir, w[0])
	fi, err := os.Stat(file)
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("%s: %s is not an executable script of the repository (%v)", c, w[0], err)
		return
	}
	src := readPage(t, file)
	shell := "sh"
	if strings.HasPrefix(src, "#!/usr/bin/env bash") || strings.HasPrefix(src, "#!/bin/bash") {
		shell = "bash"
	}
	if out, err := exec.Command(shell, "-n", file).CombinedOutput(); err != nil {
		t.Errorf("%s: %s -n: %v\n%s", c, shell, err, out)
	}
	for _, m := range scriptArg.FindAllStringSubmatch(src, -1) {
		if n, _ := strconv.Atoi(m[1]); len(w)-1 < n {
			t.Errorf("%s: %s requires argument %d", c, w[0], n)
		}
	}
}

// checkBuilt: `sha256sum FILE` hashes a file a command before it on the
// page built with `go build -o`.
func checkBuilt(t *testing.T, c docCommand, w []string, page []docCommand) {
	built := map[string]bool{}
	for _, b := range page {
		if b.line >= c.line {
			break
		}
		_, bw := b.words()
		for i := 0; i+1 < len(bw); i++ {
			if program("go")(bw) && bw[i] == "-o" {
				built[path.Join(b.dir, bw[i+1])] = true
			}
		}
	}
	for _, f := range w[1:] {
		if !built[path.Join(c.dir, f)] {
			t.Errorf("%s: no command before it on the page builds %s", c, f)
		}
	}
}

// clones are the repositories a page may tell the reader to clone, and why.
var clones = map[string]string{
	"https://github.com/pouchdb/pouchdb": "testing.md runs PouchDB's integration suites from a checkout",
}

// isGitClone matches `git clone`.
func isGitClone(w []string) bool { return len(w) > 1 && w[0] == "git" && w[1] == "clone" }

// checkClone: the repository is one of clones, cloned into a directory a
// later command of the page uses. Nothing is cloned (no network in tests).
func checkClone(t *testing.T, c docCommand, w []string, page []docCommand) {
	if len(w) != 4 {
		t.Errorf("%s: want git clone URL DIR", c)
		return
	}
	if _, ok := clones[w[2]]; !ok {
		t.Errorf("%s: %s is not a repository the pages may clone (see clones)", c, w[2])
	}
	for _, later := range page {
		if later.line > c.line && strings.Contains(later.text, w[3]) {
			return
		}
	}
	t.Errorf("%s: no later command uses %s", c, w[3])
}
