-- +goose Up
-- The CAR process of seed 000. car_processos, car_documentos and
-- car_mensagens are written by the HTTP routes, with their events in the
-- same transaction. The other tables are the consumers' effects, one row
-- per natural key, so a redelivery the inbox did not catch (another event
-- id for the same processo, say) changes nothing. They reference no other
-- table: a consumer records what the event says, whoever produced it.
CREATE TABLE car_processos (
    id              UUID PRIMARY KEY,
    requerente_id   TEXT NOT NULL CHECK (requerente_id <> ''),
    municipio_ibge  TEXT NOT NULL CHECK (municipio_ibge ~ '^[0-9]{7}$'),
    status          TEXT NOT NULL CHECK (status IN ('submetido', 'regular')),
    submetido_em    TIMESTAMPTZ NOT NULL,
    regularizado_em TIMESTAMPTZ
);

CREATE TABLE car_documentos (
    id          UUID PRIMARY KEY,
    processo_id UUID NOT NULL REFERENCES car_processos (id),
    nome        TEXT NOT NULL CHECK (nome <> ''),
    anexado_em  TIMESTAMPTZ NOT NULL
);
CREATE INDEX car_documentos_processo_id ON car_documentos (processo_id);

CREATE TABLE car_mensagens (
    id          UUID PRIMARY KEY,
    processo_id UUID NOT NULL REFERENCES car_processos (id),
    texto       TEXT NOT NULL CHECK (texto <> ''),
    enviada_em  TIMESTAMPTZ NOT NULL
);
CREATE INDEX car_mensagens_processo_id ON car_mensagens (processo_id);

-- processos.analista: one analyst per processo. vez is the turn it took.
CREATE TABLE car_atribuicoes (
    processo_id  UUID PRIMARY KEY,
    analista     TEXT NOT NULL,
    vez          BIGINT NOT NULL,
    atribuido_em TIMESTAMPTZ NOT NULL
);

-- The round robin's next turn: one row, updated in the delivery's
-- transaction. Not a sequence: nextval is not rolled back, so a delivery
-- that failed and was retried would skip an analyst.
CREATE TABLE car_rodizio (
    unico        BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (unico),
    proxima_vez  BIGINT NOT NULL
);
INSERT INTO car_rodizio (proxima_vez) VALUES (0);

-- processos.notificacao: one notification per event.
CREATE TABLE car_notificacoes (
    event_id      TEXT PRIMARY KEY,
    processo_id   UUID NOT NULL,
    evento        TEXT NOT NULL,
    requerente_id TEXT NOT NULL,
    texto         TEXT NOT NULL,
    criada_em     TIMESTAMPTZ NOT NULL
);
CREATE INDEX car_notificacoes_processo_id ON car_notificacoes (processo_id);

-- documentos.ocr: one OCR job per documento.
CREATE TABLE car_ocr (
    documento_id UUID PRIMARY KEY,
    processo_id  UUID NOT NULL,
    status       TEXT NOT NULL,
    criado_em    TIMESTAMPTZ NOT NULL
);

-- integracao.sicar: one SICAR integration request per processo.
CREATE TABLE car_sicar (
    processo_id    UUID PRIMARY KEY,
    municipio_ibge TEXT NOT NULL,
    status         TEXT NOT NULL,
    solicitada_em  TIMESTAMPTZ NOT NULL
);

-- canal.web.mensagens: a web-channel message delivered, once.
CREATE TABLE car_entregas (
    mensagem_id UUID PRIMARY KEY,
    processo_id UUID NOT NULL,
    entregue_em TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE car_entregas;
DROP TABLE car_sicar;
DROP TABLE car_ocr;
DROP TABLE car_notificacoes;
DROP TABLE car_rodizio;
DROP TABLE car_atribuicoes;
DROP TABLE car_mensagens;
DROP TABLE car_documentos;
DROP TABLE car_processos;
