package redisstore

// UseHashLayout makes s claim in the hash layout, as on a Redis before 7.0.
func UseHashLayout(s *Store) { s.hashOnly.Store(true) }
