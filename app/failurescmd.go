package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/adapters/audit"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/handlers"
)

// selectionFlags are the flags of every command that selects failures,
// named as GET /v1/admin/failures names its parameters.
type selectionFlags map[string]*string

// selectionFlagHelp names each selection flag, the query parameter it
// sets, and its help.
var selectionFlagHelp = []struct{ flag, param, help string }{
	{"ids", "ids", "the failures with these ledger `IDS`, separated by commas"},
	{"group", "group", "the failures of the group `FINGERPRINT`"},
	{"queue", "queue", "the failures of the consumer of `QUEUE`"},
	{"handler", "handler", "the failures of `HANDLER`"},
	{"reason", "reason", "the failures of reason class `REASON` (retries_exhausted, decode_error, ...)"},
	{"type", "type", "the failures of event type `NAME` (tarefa.concluida.v1)"},
	{"event-id", "event_id", "the failures of the event `ID`"},
	{"correlation-id", "correlation_id", "the failures of the correlation `ID`"},
	{"status", "status", "the failures in `STATUS` (unresolved, redriving, resolved, archived, edited); unset, every one neither archived nor edited"},
	{"since", "since", "the failures whose last failure is at or after `TIME` (RFC 3339)"},
	{"until", "until", "the failures whose last failure is before `TIME` (RFC 3339)"},
	{"text", "text", "the failures whose error holds `TEXT`, whatever its case"},
}

// addSelectionFlags adds the selection flags to cmd.
func addSelectionFlags(cmd *cobra.Command) selectionFlags {
	s := selectionFlags{}
	for _, f := range selectionFlagHelp {
		s[f.param] = cmd.Flags().String(f.flag, "", f.help)
	}
	return s
}

// filter reads the flags given as GET /v1/admin/failures reads its
// parameters.
func (s selectionFlags) filter() (failures.Filter, error) {
	return readFilter(s.params())
}

// params are the flags given, by the query parameters they stand for.
func (s selectionFlags) params() map[string]string {
	q := map[string]string{}
	for param, v := range s {
		if *v != "" {
			q[param] = *v
		}
	}
	return q
}

// failuresCommand is `failures list|groups|show`: the ledger read over the
// same code as GET /v1/admin/failures, straight from the database.
func (c *cli) failuresCommand() *cobra.Command {
	list := &cobra.Command{Use: "list", Short: "list the failures the flags select, newest first", Args: cobra.NoArgs}
	sel := addSelectionFlags(list)
	asJSON := list.Flags().Bool("json", false, "print each failure as a line of JSON")
	limit := list.Flags().Int("limit", 50, fmt.Sprintf("list `N` failures at most (1 to %d)", failures.MaxPage))
	after := list.Flags().Int64("after", 0, "list the failures older than the one with ledger `ID` (the next page)")
	list.RunE = c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		f, err := sel.filter()
		if *limit < 1 || *limit > failures.MaxPage {
			err = errors.Join(err, fmt.Errorf("--limit must be 1 to %d, got %d", failures.MaxPage, *limit))
		}
		if err != nil {
			return err
		}
		return withLedger(ctx, cfg, stderr, func(l failures.Ledger) error {
			fs, err := l.List(ctx, f, failures.Page{After: *after, Limit: *limit})
			if err != nil {
				return err
			}
			if *asJSON {
				return jsonLines(stdout, fs)
			}
			if err := writeFailures(stdout, fs); err != nil {
				return err
			}
			if len(fs) == *limit {
				_, err = fmt.Fprintf(stdout, "(more: --after %d)\n", fs[len(fs)-1].ID)
			}
			return err
		})
	})

	groups := &cobra.Command{Use: "groups", Short: "list the groups of the failures the flags select, the largest first", Args: cobra.NoArgs}
	gsel := addSelectionFlags(groups)
	gJSON := groups.Flags().Bool("json", false, "print each group as a line of JSON")
	by := groups.Flags().String("by", "cause", "group by `KEY`: cause (a fingerprint, with its comment), queue, event_type or reason")
	groups.RunE = c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		q := gsel.params()
		q["by"] = *by
		s, err := readGroupSelection(q)
		if err != nil {
			return err
		}
		return withLedger(ctx, cfg, stderr, func(l failures.Ledger) error {
			gs, err := l.Groups(ctx, s.filter, s.by)
			if err != nil {
				return err
			}
			if *gJSON {
				return jsonLines(stdout, gs)
			}
			return writeGroups(stdout, s.by, gs)
		})
	})

	show := &cobra.Command{Use: "show ID", Short: "print one failure whole: its headers and its body", Args: cobra.ExactArgs(1)}
	show.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || id < 1 {
			return fmt.Errorf("the failure id must be a positive whole number (see the ID column of `moenda failures list`), got %q", args[0])
		}
		return c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
			return withLedger(ctx, cfg, stderr, func(l failures.Ledger) error {
				f, err := l.Get(ctx, id)
				if errors.Is(err, failures.ErrNotFound) {
					return fmt.Errorf("no failure %d in the ledger", id)
				}
				if err != nil {
					return err
				}
				return writeFailure(stdout, f)
			})
		})(cmd, args)
	}
	cmds := []*cobra.Command{list, groups, show, c.failureCommentCommand(), c.failureEditCommand()}
	for _, a := range []struct{ name, short string }{
		{"archive", "hide the unresolved failures the flags select from the default views; kept for failures.retention"},
		{"unarchive", "make the archived failures the flags select unresolved again"},
		{"delete", "delete the failures the flags select, whatever their status (--yes: it cannot be undone)"},
	} {
		cmds = append(cmds, c.failureActionCommand(a.name, a.short))
	}
	return group("failures", "the failure ledger: the dead letters, grouped by cause", cmds...)
}

// failureActionCommand is `failures archive|unarchive|delete`: the action
// API's, over the same code, recorded in the audit as done by cli:$USER.
func (c *cli) failureActionCommand(name, short string) *cobra.Command {
	cmd := &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs}
	sel := addSelectionFlags(cmd)
	yes := false
	if name == "delete" {
		cmd.Flags().BoolVar(&yes, "yes", false, "delete without asking: deleted failures cannot be brought back")
	}
	cmd.RunE = c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		if name == "delete" && !yes {
			return errors.New("failures delete cannot be undone: add --yes, or archive them instead (failures archive)")
		}
		params := map[string]string{}
		for param, v := range sel {
			if *v != "" {
				params[param] = *v
			}
		}
		return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
			selected, changed, err := b.act(ctx, c.caller(), "failures."+name, params)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "%d selected, %d %s\n", selected, changed, map[string]string{"archive": "archived", "unarchive": "unarchived", "delete": "deleted"}[name])
			return err
		})
	})
	return cmd
}

// failureCommentCommand is `failures comment GROUP --text TEXT`: the
// comment API's, over the same code, recorded in the audit as done by
// cli:$USER.
func (c *cli) failureCommentCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "comment GROUP --text TEXT", Short: "note the cause on a group of failures (--text '' clears it)", Args: cobra.ExactArgs(1)}
	text := cmd.Flags().String("text", "", fmt.Sprintf("the comment: `TEXT` of %d characters at most; empty clears it", failures.MaxComment))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed("text") {
			return errors.New("--text TEXT is required: the comment, or --text '' to clear it")
		}
		return c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
			return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
				out, err := b.comment(ctx, c.caller(), args[0], *text)
				if err != nil {
					return err
				}
				if out.Comment == nil {
					_, err = fmt.Fprintf(stdout, "group %s: comment cleared\n", out.Group)
				} else {
					_, err = fmt.Fprintf(stdout, "group %s: comment set by %s\n", out.Group, out.Comment.By)
				}
				return err
			})
		})(cmd, args)
	}
	return cmd
}

// failureEditCommand is `failures edit ID --body FILE`: the edit API's,
// over the same code, asking before it edits as `redrive start` does.
func (c *cli) failureEditCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "edit ID --body FILE", Short: "replace a failure's body, keeping the original, and re-drive the edit (failures.allow_edit)", Args: cobra.ExactArgs(1)}
	file := cmd.Flags().String("body", "", "the new body: a `FILE`, or - for the standard input")
	yes := cmd.Flags().Bool("yes", false, "edit without asking (scripts: a terminal is asked)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || id < 1 {
			return fmt.Errorf("the failure id must be a positive whole number (see the ID column of `moenda failures list`), got %q", args[0])
		}
		if *file == "" {
			return errors.New("--body FILE is required: the new body, or - for the standard input")
		}
		return c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
			rules := cfg.editRules()
			body, err := readBody(cmd.InOrStdin(), *file, rules.maxBytes)
			if err != nil {
				return err
			}
			return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
				// A body that cannot be sent is refused before anything is
				// asked, by editFailure, which records the refusal.
				if f, _, err := b.checkEdit(ctx, id, body, rules); err == nil {
					fmt.Fprintf(stdout, "failure %d: event %s on %s; the edit, %d bytes, is kept as a new failure beside it\n", f.ID, f.EventID, f.FailedQueue, len(body))
					if err := confirm(stdout, *yes, fmt.Sprintf("re-drive the edit to %s?", f.FailedQueue)); err != nil {
						return err
					}
				}
				out, err := b.editFailure(ctx, c.caller(), id, body, rules)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(stdout, "failure %d edited as failure %d; re-drive %d started (moenda redrive status %d)\n", out.EditOf, out.EditID, out.RedriveID, out.RedriveID)
				return err
			})
		})(cmd, args)
	}
	return cmd
}

// readBody reads a new body from the file name, or from stdin when name
// is -, up to one byte more than max (0: no bound), so that a larger one
// is refused for its size rather than cut.
func readBody(stdin io.Reader, name string, max int) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--body: %w", err)
		}
		defer f.Close()
		r = f
	}
	if max > 0 {
		r = io.LimitReader(r, int64(max)+1)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("--body %s: %w", name, err)
	}
	return body, nil
}

// auditCommand is `audit`: the audit's entries, newest first.
func (c *cli) auditCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "list who did what through the administration, refusals included, newest first", Args: cobra.NoArgs}
	flags := map[string]*string{}
	for _, f := range []struct{ name, help string }{
		{"actor", "the entries of `NAME` (a token's name, or cli:USER)"},
		{"action", "the entries of `ACTION` (failures.archive, outbox.republish, ...)"},
		{"outcome", "the entries of `OUTCOME`: done, refused or failed"},
		{"since", "the entries at or after `TIME` (RFC 3339)"},
		{"until", "the entries before `TIME` (RFC 3339)"},
	} {
		flags[f.name] = cmd.Flags().String(f.name, "", f.help)
	}
	limit := cmd.Flags().String("limit", "50", fmt.Sprintf("list `N` entries at most (1 to %d)", failures.MaxPage))
	asJSON := cmd.Flags().Bool("json", false, "print each entry as a line of JSON")
	cmd.RunE = c.withConfig(func(ctx context.Context, cfg *Resolved, stdout, stderr io.Writer) error {
		q := map[string]string{"limit": *limit}
		for name, v := range flags {
			if *v != "" {
				q[name] = *v
			}
		}
		f := audit.Filter{Actor: q["actor"], Action: q["action"], Outcome: q["outcome"]}
		page, errs := readPage(q)
		if err := errors.Join(append(errs, readTimes(q, &f.Since, &f.Until)...)...); err != nil {
			return err
		}
		return withWorkbench(ctx, cfg, stderr, func(b *workbench) error {
			entries, err := b.audit.List(ctx, f, 0, page.Limit)
			if err != nil {
				return err
			}
			if *asJSON {
				return jsonLines(stdout, entries)
			}
			return writeRows(stdout, []string{"ID", "AT", "ACTOR", "ROLE", "ACTION", "OUTCOME", "SELECTION", "DETAIL"}, entries, func(e audit.Entry) []string {
				sel, _ := json.Marshal(e.Selection)
				detail, _ := json.Marshal(e.Detail)
				return []string{strconv.FormatInt(e.ID, 10), e.At.Format(time.RFC3339), e.Actor, e.Role, e.Action, e.Outcome, string(sel), string(detail)}
			})
		})
	})
	return cmd
}

// withLedger runs use on the ledger of cfg's database.
func withLedger(ctx context.Context, cfg *Resolved, stderr io.Writer, use func(failures.Ledger) error) error {
	return withWorkbench(ctx, cfg, stderr, func(b *workbench) error { return use(b.ledger) })
}

// withWorkbench runs use on the ledger and the audit of cfg's database.
func withWorkbench(ctx context.Context, cfg *Resolved, stderr io.Writer, use func(*workbench) error) error {
	if cfg.inProcess() {
		return fmt.Errorf("failures: broker.kind %s keeps the failure ledger and the audit inside the serving process; ask it: GET /v1/admin/failures", cfg.Broker.Kind)
	}
	return withOutbox(ctx, cfg, stderr, func(r *resources) error { return use(r.newWorkbench()) })
}

// jsonLines prints each of vs as a line of JSON.
func jsonLines[T any](w io.Writer, vs []T) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// writeFailures prints failures as a table, one a line.
func writeFailures(w io.Writer, fs []failures.Failure) error {
	return writeRows(w, []string{"ID", "STATUS", "QUEUE", "REASON", "EVENT", "EVENT ID", "LAST FAILURE", "ERROR"}, fs, func(f failures.Failure) []string {
		return []string{strconv.FormatInt(f.ID, 10), string(f.Status), f.FailedQueue, f.Reason, orDash(f.EventName), f.EventID,
			f.LastFailureAt.Format(time.RFC3339), oneLine(f.Error, 80)}
	})
}

// writeGroups prints groups by by as a table, one a line: a cause's
// with its handler, reason, error and comment; another's under its key.
func writeGroups(w io.Writer, by failures.GroupBy, gs []failures.Group) error {
	if by == failures.ByCause {
		return writeRows(w, []string{"GROUP", "COUNT", "HANDLER", "REASON", "QUEUES", "FIRST", "LAST", "ERROR", "COMMENT"}, gs, func(g failures.Group) []string {
			comment := "-"
			if g.Comment != nil {
				comment = oneLine(g.Comment.Text, 60) + " (" + g.Comment.By + ")"
			}
			return []string{g.Fingerprint, strconv.Itoa(g.Count), orDash(g.Handler), g.Reason, strings.Join(g.Queues, ","),
				g.FirstFailureAt.Format(time.RFC3339), g.LastFailureAt.Format(time.RFC3339), oneLine(g.Error, 80), comment}
		})
	}
	head := map[failures.GroupBy]string{failures.ByQueue: "QUEUE", failures.ByEventType: "TYPE", failures.ByReason: "REASON"}[by]
	return writeRows(w, []string{head, "COUNT", "QUEUES", "TYPES", "FIRST", "LAST"}, gs, func(g failures.Group) []string {
		return []string{orDash(g.Key), strconv.Itoa(g.Count), strings.Join(g.Queues, ","), strings.Join(g.EventNames, ","),
			g.FirstFailureAt.Format(time.RFC3339), g.LastFailureAt.Format(time.RFC3339)}
	})
}

// writeRows prints vs as a table under head, a row each, or "none".
func writeRows[T any](w io.Writer, head []string, vs []T, row func(T) []string) error {
	if len(vs) == 0 {
		_, err := fmt.Fprintln(w, "none")
		return err
	}
	rows := [][]string{head}
	for _, v := range vs {
		rows = append(rows, row(v))
	}
	return writeTable(w, rows)
}

// writeFailure prints one failure: its fields, its headers, and its body
// as text when it is text.
func writeFailure(w io.Writer, f failures.Failure) error {
	err := writeTable(w, [][]string{
		{"id:", strconv.FormatInt(f.ID, 10)}, {"status:", string(f.Status)}, {"dead-letter queue:", f.Queue},
		{"failed queue:", f.FailedQueue}, {"handler:", orDash(f.Handler)}, {"event:", orDash(f.EventName)}, {"event id:", f.EventID},
		{"correlation id:", orDash(f.CorrelationID)}, {"reason:", f.Reason}, {"group:", f.Fingerprint},
		{"attempts:", strconv.Itoa(f.Attempts)}, {"occurrences:", strconv.Itoa(f.Occurrences)},
		{"first failure:", f.FirstFailureAt.Format(time.RFC3339Nano)}, {"last failure:", f.LastFailureAt.Format(time.RFC3339Nano)},
		{"recorded:", f.RecordedAt.Format(time.RFC3339Nano)},
		{"published to:", orDash(f.OriginalExchange) + " " + orDash(f.OriginalRoutingKey)}, {"error:", f.Error},
		{"edit of:", orNone(f.EditOf)}, {"edited by:", orNone(f.EditedBy)},
	})
	if err != nil {
		return err
	}
	headers, err := json.MarshalIndent(f.Headers, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "headers: %s\n", headers)
	body := string(f.Body)
	var v any
	if json.Unmarshal(f.Body, &v) == nil {
		pretty, _ := json.MarshalIndent(v, "", "  ")
		body = string(pretty)
	} else if !utf8.Valid(f.Body) {
		body = fmt.Sprintf("(%d bytes, not text)", len(f.Body))
	}
	_, err = fmt.Fprintf(w, "body:\n%s\n", body)
	return err
}

// orNone is the failure id, or - for 0 (none).
func orNone(id int64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatInt(id, 10)
}

// oneLine is s on one line, cut to n bytes.
func oneLine(s string, n int) string {
	return handlers.Cut(strings.Join(strings.Fields(s), " "), n)
}
