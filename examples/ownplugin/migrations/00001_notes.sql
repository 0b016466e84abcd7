-- +goose Up
CREATE TABLE notes (
    id   TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    seen BOOLEAN NOT NULL DEFAULT false
);

-- +goose Down
DROP TABLE notes;
