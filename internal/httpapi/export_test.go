package httpapi

// Routes lists METHOD and path of every route, for the OpenAPI test.
func Routes() [][2]string {
	var rs [][2]string
	for _, r := range routes {
		rs = append(rs, [2]string{r.method, r.path})
	}
	return rs
}
