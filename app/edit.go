package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/audit"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// editRules are the settings an edit of a failure obeys.
type editRules struct {
	// allow is failures.allow_edit.
	allow bool
	// maxRedrives is failures.max_redrives, for the edit's re-drive.
	maxRedrives int
	// maxBytes is router.max_message_bytes: a larger body would be
	// dead-lettered again unread.
	maxBytes int
}

// editRules are the settings of c that an edit obeys.
func (c *Resolved) editRules() editRules {
	return editRules{allow: c.Failures.AllowEdit, maxRedrives: c.Failures.MaxRedrives, maxBytes: c.Router.MaxMessageBytes}
}

// errEditOff refuses every edit while failures.allow_edit is off: an
// edit sends a body no publisher wrote, which a deployment must choose.
var errEditOff = handlers.NewError(handlers.ErrConflict, "editing failures is off: set failures.allow_edit: true")

// editedFailure is the answer of an edit: the new failure, the one it
// edits, and the re-drive that sends it.
type editedFailure struct {
	EditID    int64 `json:"edit_id"`
	EditOf    int64 `json:"edit_of"`
	RedriveID int64 `json:"redrive_id"`
}

// checkEdit says whether body may replace the body of failure id: edits
// are allowed, the failure is unresolved, and body decodes as its queue
// reads its messages (the queue's envelope, with the failure's headers as
// the delivery's metadata) into the same event id. It changes nothing,
// and returns the failure and the event body carries.
//
// The event id is kept so that the queue's inbox takes the edit once: the
// original failed there, so the inbox holds no claim for it, and the
// re-drive is settled, as any is, by the claim.
func (b *workbench) checkEdit(ctx context.Context, id int64, body []byte, rules editRules) (failures.Failure, event.Event, error) {
	if !rules.allow {
		return failures.Failure{}, event.Event{}, errEditOff
	}
	f, err := b.ledger.Get(ctx, id)
	if errors.Is(err, failures.ErrNotFound) {
		return f, event.Event{}, handlers.NewError(handlers.ErrNotFound, fmt.Sprintf("no failure %d in the ledger", id))
	}
	if err != nil {
		return f, event.Event{}, err
	}
	if err := editable(f); err != nil {
		return f, event.Event{}, err
	}
	if rules.maxBytes > 0 && len(body) > rules.maxBytes {
		return f, event.Event{}, invalid("the edit is %d bytes, more than router.max_message_bytes (%d): its queue would not read it", len(body), rules.maxBytes)
	}
	envelope := b.top.Envelope(f.FailedQueue)
	e, err := event.DecodeAs(envelope, body, message.Metadata(f.Headers))
	if err != nil {
		return f, e, invalid("the edit does not decode as queue %s reads it (envelope %s): %v", f.FailedQueue, envelope, err)
	}
	if e.ID != f.EventID {
		return f, e, invalid("the edit's event id %s is not the failure's, %s: an edit keeps the event id, so that %s's inbox takes it once", e.ID, f.EventID, f.FailedQueue)
	}
	return f, e, nil
}

// editable says why f cannot be edited, if it cannot: only an unresolved
// failure can, and only once.
func editable(f failures.Failure) error {
	conflict := func(format string, args ...any) error {
		return handlers.NewError(handlers.ErrConflict, fmt.Sprintf(format, args...))
	}
	switch f.Status {
	case failures.Unresolved:
		return nil
	case failures.Redriving:
		return conflict("failure %d is being re-driven (re-drive %d): edit it once that settles, or cancel the re-drive", f.ID, f.RedriveID)
	case failures.Archived:
		return conflict("failure %d is archived: unarchive it to edit it", f.ID)
	case failures.Edited:
		return conflict("failure %d was edited already: its edit is failure %d; edit that one", f.ID, f.EditedBy)
	default:
		return conflict("failure %d is %s: there is nothing to edit", f.ID, f.Status)
	}
}

// editFailure replaces the body of failure id with body, as caller: the
// edit is a new failure linked to the original, which is kept, and is
// re-driven at once to the queue that failed, alone, as any re-drive of
// one failure is. It is recorded in the audit, refused or not.
func (b *workbench) editFailure(ctx context.Context, caller Caller, id int64, body []byte, rules editRules) (out editedFailure, err error) {
	out.EditOf = id
	defer func() {
		sum := sha256.Sum256(body)
		outcome, detail := audit.Done, map[string]any{"edit_id": out.EditID, "redrive_id": out.RedriveID, "bytes": len(body), "sha256": hex.EncodeToString(sum[:])}
		switch {
		case errors.Is(err, errEditOff):
			outcome, detail = audit.Refused, map[string]any{"reason": err.Error()}
		case err != nil:
			outcome, detail = audit.Failed, map[string]any{"error": err.Error(), "edit_id": out.EditID}
		}
		b.record(ctx, audit.Entry{Actor: caller.Name, Role: caller.Role, Action: "failures.edit",
			Selection: map[string]string{"id": strconv.FormatInt(id, 10)}, Outcome: outcome, Detail: detail})
	}()
	_, e, err := b.checkEdit(ctx, id, body, rules)
	if err != nil {
		return out, err
	}
	edit, err := b.ledger.Edit(ctx, id, failures.Edition{Body: body, EventName: e.Name})
	if errors.Is(err, failures.ErrNotUnresolved) { // changed since checkEdit read it
		return out, handlers.NewError(handlers.ErrConflict, fmt.Sprintf("failure %d is not unresolved any more: %v", id, err))
	}
	if err != nil {
		return out, err
	}
	out.EditID = edit.ID
	o := redrive.Options{MaxRedrives: rules.maxRedrives}
	plan, err := redrive.MakePlan(ctx, b.ledger, []int64{edit.ID}, o)
	if err == nil && plan.Send != 1 {
		err = fmt.Errorf("the plan sends %d failures, skipping %v", plan.Send, plan.Skipped)
	}
	if err == nil {
		out.RedriveID, err = redrive.Start(ctx, b.redrives, plan, o, caller.Name,
			map[string]string{"ids": strconv.FormatInt(edit.ID, 10), "edit_of": strconv.FormatInt(id, 10)})
	}
	if err != nil {
		return out, fmt.Errorf("failure %d is edited as failure %d, which could not be re-driven (moenda redrive start --ids %d): %w", id, edit.ID, edit.ID, err)
	}
	return out, nil
}

// editRoute answers POST /v1/admin/failures/{id}/edit, whose body is the
// failure's new body, with 201 and the edit, its original and its
// re-drive.
func (p *Platform) editRoute(w http.ResponseWriter, r *http.Request) {
	id, err := httpjson.PathID("id", invalid("the failure id in the path must be a positive whole number"))(r)
	if err != nil {
		httpjson.Fail(w, r, p.logger, err)
		return
	}
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than the limit of %d bytes", tooBig.Limit))
		return
	}
	if err != nil {
		httpjson.Fail(w, r, p.logger, invalid("the body could not be read: %v", err))
		return
	}
	out, err := p.workbench.editFailure(r.Context(), CallerOf(r.Context()), id, body, p.cfg.editRules())
	httpjson.Respond(w, r, p.logger, http.StatusCreated, out, err)
}
