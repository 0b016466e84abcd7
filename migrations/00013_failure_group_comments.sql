-- +goose Up
-- An operator's comment on a group of failures of one cause (what it is,
-- who is on it), keyed by the group's fingerprint. It is kept apart from
-- the failures, which retention deletes: a cause that comes back finds
-- its note.
CREATE TABLE moenda_failure_group_comments (
    fingerprint TEXT PRIMARY KEY,
    comment     TEXT NOT NULL CHECK (comment <> ''),
    set_by      TEXT NOT NULL,
    set_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE moenda_failure_group_comments;
