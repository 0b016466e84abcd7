-- +goose Up
-- Seed 004's user-, car- and rental-service in one schema: the rental's
-- state, its history and the car it reserves change in one transaction,
-- with the saga's next event in the outbox.
CREATE TABLE locacoes_usuarios (
    id         UUID PRIMARY KEY,
    nome       TEXT NOT NULL CHECK (nome <> ''),
    email      TEXT NOT NULL,
    cpf        CHAR(11) NOT NULL UNIQUE CHECK (cpf ~ '^[0-9]{11}$'),
    senha_hash TEXT NOT NULL,
    criado_em  TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX locacoes_usuarios_email ON locacoes_usuarios (lower(email));

CREATE TABLE locacoes_carros (
    id           UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    placa        CHAR(7) NOT NULL UNIQUE,
    modelo       TEXT NOT NULL,
    marca        TEXT NOT NULL,
    cor          TEXT NOT NULL,
    ano          INTEGER NOT NULL,
    valor_diaria NUMERIC(10, 2) NOT NULL CHECK (valor_diaria > 0),
    status       TEXT NOT NULL CHECK (status IN ('DISPONIVEL', 'RESERVADO', 'ALUGADO', 'MANUTENCAO')),
    -- The rental holding the car while it is RESERVADO.
    rental_id    UUID
);

-- The catalog the seed's car-service starts with.
INSERT INTO locacoes_carros (placa, modelo, marca, cor, ano, valor_diaria, status) VALUES
    ('RIO2A26', 'Corolla', 'Toyota', 'Prata', 2022, 180.00, 'DISPONIVEL'),
    ('SAO3B17', 'Civic', 'Honda', 'Preto', 2023, 220.00, 'DISPONIVEL'),
    ('BHZ4C58', 'Polo', 'Volkswagen', 'Branco', 2021, 120.00, 'DISPONIVEL'),
    ('POA5D91', 'Mobi', 'Fiat', 'Vermelho', 2020, 85.00, 'DISPONIVEL'),
    ('CWB6E32', 'Onix', 'Chevrolet', 'Azul', 2022, 110.00, 'DISPONIVEL'),
    ('REC7F44', 'HB20', 'Hyundai', 'Branco', 2023, 130.00, 'DISPONIVEL'),
    ('FOR8G65', 'Argo', 'Fiat', 'Cinza', 2022, 115.00, 'DISPONIVEL'),
    ('MAN9H76', 'Renegade', 'Jeep', 'Verde', 2021, 280.00, 'MANUTENCAO');

CREATE TABLE locacoes (
    id            UUID PRIMARY KEY,
    user_id       UUID NOT NULL REFERENCES locacoes_usuarios (id),
    user_email    TEXT NOT NULL,
    user_cpf      CHAR(11) NOT NULL,
    carro_id      UUID NOT NULL REFERENCES locacoes_carros (id),
    status        TEXT NOT NULL CHECK (status IN ('PENDENTE', 'CONFIRMADO', 'REJEITADO', 'FALHOU', 'DEVOLVIDO')),
    motivo        TEXT,
    criado_em     TIMESTAMPTZ NOT NULL,
    atualizado_em TIMESTAMPTZ NOT NULL
);
-- One rental in analysis per customer, as the seed's rental-service rules.
CREATE UNIQUE INDEX locacoes_uma_pendente ON locacoes (user_id) WHERE status = 'PENDENTE';

CREATE TABLE locacoes_historico (
    id        BIGSERIAL PRIMARY KEY,
    rental_id UUID NOT NULL REFERENCES locacoes (id),
    status    TEXT NOT NULL,
    motivo    TEXT,
    -- The event that moved the rental, when one did.
    event_id  UUID,
    em        TIMESTAMPTZ NOT NULL
);
CREATE INDEX locacoes_historico_rental ON locacoes_historico (rental_id, id);

-- +goose Down
DROP TABLE locacoes_historico;
DROP TABLE locacoes;
DROP TABLE locacoes_carros;
DROP TABLE locacoes_usuarios;
