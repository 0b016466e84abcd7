-- +goose Up
-- The probe is platform, so its tables speak English like the rest of
-- the platform; renamed in place, so a database migrated before keeps
-- its rows.
ALTER TABLE faultprobe_efeitos RENAME TO faultprobe_effects;
ALTER TABLE faultprobe_effects RENAME COLUMN nota TO note;
ALTER TABLE faultprobe_contador RENAME TO faultprobe_counter;

-- +goose Down
ALTER TABLE faultprobe_counter RENAME TO faultprobe_contador;
ALTER TABLE faultprobe_effects RENAME COLUMN note TO nota;
ALTER TABLE faultprobe_effects RENAME TO faultprobe_efeitos;
