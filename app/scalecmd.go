package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moenda/moenda/app/bench/scale"
)

// scaleHeading opens the section `bench scale` writes in BENCHMARKS.md;
// `bench --markdown` keeps it.
const scaleHeading = "## Scale-out"

// scaleCommand parses `bench scale`'s own flags and returns the command.
func scaleCommand(args []string) (func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error, bool) {
	fl := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	markdown := fl.String("markdown", "", "")
	asJSON := fl.String("json", "", "")
	dir := fl.String("dir", "", "")
	serveBin := fl.String("serve-bin", "", "")
	if err := fl.Parse(args); err != nil || fl.NArg() > 0 {
		return nil, false
	}
	return func(ctx context.Context, cfg *Resolved, stdout, _ io.Writer) error {
		if cfg.Broker.Kind != BrokerAMQP {
			return errors.New("bench scale: runs serve processes on PostgreSQL and RabbitMQ; run it in an environment with broker.kind amqp (local)")
		}
		bin, err := serveBinary("bench scale", *serveBin)
		if err != nil {
			return err
		}
		keep := *dir
		if keep == "" {
			keep = filepath.Join(os.TempDir(), fmt.Sprintf("moenda-scale-%d", time.Now().Unix()))
		}
		res, err := scale.Run(ctx, scale.Options{ServeBin: bin, PostgresURL: cfg.Postgres.URL, AMQPURL: cfg.AMQP.Nodes()[0], Dir: keep, Progress: stdout})
		if err != nil {
			return err
		}
		if *asJSON != "" {
			if err := writeFile(*asJSON, func(w io.Writer) error {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}); err != nil {
				return err
			}
		}
		var section bytes.Buffer
		if err := scale.Markdown(&section, res, "go run . bench scale --markdown BENCHMARKS.md"); err != nil {
			return err
		}
		if *markdown != "" {
			old, err := os.ReadFile(*markdown)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if err := os.WriteFile(*markdown, []byte(replaceSection(string(old), scaleHeading, section.String())), 0o644); err != nil {
				return err
			}
		}
		if _, err := stdout.Write(section.Bytes()); err != nil {
			return err
		}
		if !res.Valid() {
			return errors.New("bench scale: the run lost events, applied some twice, or failed; see above")
		}
		return nil
	}, true
}

// replaceSection returns doc with the section that heading opens (up to
// the next "## " heading) replaced by section, or section appended.
func replaceSection(doc, heading, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	start, end, ok := sectionBounds(doc, heading)
	if !ok {
		if doc == "" {
			return section
		}
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	if end < len(doc) {
		section += "\n"
	}
	return doc[:start] + section + doc[end:]
}

// sectionOf returns the section that heading opens in doc, or "".
func sectionOf(doc, heading string) string {
	start, end, _ := sectionBounds(doc, heading)
	return doc[start:end]
}

// sectionBounds finds the section that heading opens in doc: from the
// heading's line to the next "## " heading or the end.
func sectionBounds(doc, heading string) (start, end int, ok bool) {
	at := strings.Index("\n"+doc, "\n"+heading+"\n")
	if at < 0 {
		return 0, 0, false
	}
	end = len(doc)
	if next := strings.Index(doc[at+len(heading):], "\n## "); next >= 0 {
		end = at + len(heading) + next + 1
	}
	return at, end, true
}
