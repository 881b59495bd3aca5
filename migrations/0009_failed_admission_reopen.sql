-- A replayed admission the consumer refuses again is listed again: its row
-- is reopened with the new failure (store.InsertFailedAdmissions), and
-- failures counts how many times the order's admissions were refused.

ALTER TABLE admission_failed ADD COLUMN failures INT NOT NULL DEFAULT 1;

---- create above / drop below ----

ALTER TABLE admission_failed DROP COLUMN failures;
