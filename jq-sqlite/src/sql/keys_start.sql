-- Records ?4 starts of queue ?1 and key ?2 at instant ?3.
INSERT INTO key_starts (queue, key, at, n) VALUES (?1, ?2, ?3, ?4)
