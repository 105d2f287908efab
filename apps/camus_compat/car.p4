// A Camus-style spec: every field declared by its pragma (with its width), nothing else; the
// order of the pragma lines is the field order. `compile --target p4` writes the control block
// `camus_control.p4` for your own program (no whole program: there is no header stack here).
@pragma query_field(car.lat, 16)
@pragma query_field(car.long, 16)
@pragma query_field(car.speed, 16)
@pragma query_field_exact(standard_metadata.ingress_port, 9)
@pragma query_default_action(report_unknown)
