-- The transactional outbox: every state change of a voucher or a reservation
-- writes its event in the same transaction as the change, so an event exists
-- exactly when its change committed. The ledger that holds the dispatcher's
-- advisory lock delivers them to each sink (webhooks, Kafka) in id order.

-- An event's id is taken only once its transaction has an xid, so that the
-- dispatcher's watermark (the ids every transaction that could still commit
-- lies above) holds: see ledger/outbox.go. Every writer changes a row before
-- it writes its event, so this only makes that order a fact of the schema.
CREATE SEQUENCE voucher_event_id_seq;
CREATE FUNCTION voucher_event_next_id() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('voucher_event_id_seq') END
$$;

-- An instant as events carry it: RFC 3339 in UTC, microseconds.
CREATE FUNCTION event_time(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

CREATE TABLE voucher_event (
    id           BIGINT      PRIMARY KEY DEFAULT voucher_event_next_id(),
    type         VARCHAR(32) NOT NULL,
    occurred_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    voucher_code VARCHAR(32) NOT NULL,
    data         JSONB       NOT NULL
);
ALTER SEQUENCE voucher_event_id_seq OWNED BY voucher_event.id;

-- Where delivery stands: name 'watermark' is the highest id below which every
-- event is committed or never will be (the feed and the sinks read up to it);
-- every other row is a sink ('webhook:URL', 'kafka:TOPIC'), which has
-- delivered or parked every event up to position.
CREATE TABLE event_cursor (
    name       TEXT        PRIMARY KEY,
    position   BIGINT      NOT NULL DEFAULT 0,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Events a sink gave up on after its attempts (FAILED, parked: later events
-- went on), and those an operator asked to send again (RETRY).
CREATE TABLE event_failure (
    sink       TEXT        NOT NULL,
    event_id   BIGINT      NOT NULL REFERENCES voucher_event(id) ON DELETE CASCADE,
    status     VARCHAR(8)  NOT NULL,
    attempts   INT         NOT NULL,
    last_error TEXT        NOT NULL,
    failed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (sink, event_id),
    CONSTRAINT ck_failure_status CHECK (status IN ('FAILED', 'RETRY'))
);
CREATE INDEX ix_event_failure_event ON event_failure (event_id);

---- create above / drop below ----

DROP TABLE event_failure;
DROP TABLE event_cursor;
DROP TABLE voucher_event;
DROP FUNCTION event_time(timestamptz);
DROP FUNCTION voucher_event_next_id();
