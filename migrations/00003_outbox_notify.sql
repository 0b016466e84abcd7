-- +goose Up
-- Wake the outbox relay when rows arrive, so an idle relay sleeps instead of
-- polling. One notification per statement; PostgreSQL folds repeats within
-- a transaction and delivers them at commit.
-- +goose StatementBegin
CREATE FUNCTION moenda_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('moenda_outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER watermill_outbox_notify
    AFTER INSERT ON watermill_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION moenda_outbox_notify();

-- +goose Down
DROP TRIGGER watermill_outbox_notify ON watermill_outbox;
DROP FUNCTION moenda_outbox_notify();
