-- A shared link may ask for a password before it shows the overview (Plausible's password-protected shared
-- links): its argon2 hash, NULL for a link anyone holding the URL may open.
ALTER TABLE site_shared_links ADD COLUMN password_hash text;
