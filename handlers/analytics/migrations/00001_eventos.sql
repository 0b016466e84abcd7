-- +goose Up
-- Facts of the analytics reader (seed 000's analytics.metricas): one row
-- per event ever seen, keyed by its id, so a redelivery or a replay counts
-- nothing twice. Counts are a GROUP BY at read time. event_id is TEXT, as
-- in the inbox: analytics never rejects an event over its id's form.
CREATE TABLE analytics_eventos (
    event_id       TEXT PRIMARY KEY,
    evento         TEXT NOT NULL,
    ocorrido_em    TIMESTAMPTZ NOT NULL,
    municipio_ibge TEXT NULL
);
-- Reads of one day and Rewind (ocorrido_em >= from) are ranges on time.
CREATE INDEX analytics_eventos_ocorrido_em ON analytics_eventos (ocorrido_em);

-- +goose Down
DROP TABLE analytics_eventos;
