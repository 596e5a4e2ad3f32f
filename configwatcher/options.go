package configwatcher

// applyOptions applies opts in order to o, passing over nil ones. apply is
// the option interface's method, as a method expression
// (ClusterAPIOption.applyToClusterAPI, say).
func applyOptions[T comparable, O any](o *O, opts []T, apply func(T, *O) error) error {
	var none T
	for _, opt := range opts {
		if opt == none {
			continue
		}
		if err := apply(opt, o); err != nil {
			return err
		}
	}
	return nil
}
