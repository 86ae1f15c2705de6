-- Records ?3 starts of queue ?1 at instant ?2.
INSERT INTO queue_starts (queue, at, n) VALUES (?1, ?2, ?3)
