{{- /*
The scenario the controller runs, as JSON: scenario.config (the options every kind takes, and
the kind) merged with the chosen kind's own section, scenario.<kind>. Kind-scoped, so the
sections of other kinds (the chart's exec-storm defaults, or what an earlier release set and
`helm upgrade --reuse-values` keeps) never reach this kind. Fails, naming every problem at once,
when scenario.config holds an option that is a kind's own (templates/_kinds.tpl lists them,
generated from the code by tools/chart_kinds.py).
Usage: {{ $cfg := include "swarmscope.scenarioConfig" . | fromJson }}
*/ -}}
{{- define "swarmscope.scenarioConfig" -}}
{{- $s := .Values.scenario -}}
{{- $kind := toString $s.config.scenario -}}
{{- $opts := include "swarmscope.kindOptions" . | fromJson -}}
{{- $refused := include "swarmscope.kindsRefused" . | fromJson -}}
{{- if hasKey $refused $kind -}}
{{- fail (printf "scenario.config.scenario=%s: the chart does not run this kind: %s" $kind (get $refused $kind)) -}}
{{- end -}}
{{- $errs := list -}}
{{- $cfg := deepCopy (default dict (get $s $kind)) -}}
{{- range $k, $v := $s.config -}}
{{- if has $k $opts.config -}}
{{- $_ := set $cfg $k $v -}}
{{- else if has $k (get $opts $kind) -}}
{{- $errs = append $errs (printf "scenario.config.%s is an option of the %s scenario: set it as scenario.%s.%s (each kind's options have their own section, so a kind switch under helm upgrade --reuse-values leaves them behind)" $k $kind $kind $k) -}}
{{- else -}}
{{- $owners := list -}}
{{- range $other := without (keys $opts | sortAlpha) "config" -}}
{{- if has $k (get $opts $other) }}{{ $owners = append $owners $other }}{{ end -}}
{{- end -}}
{{- $errs = append $errs (printf "scenario.config.%s is not an option of the %s scenario%s: remove it" $k $kind (ternary "" (printf " (it is one of %s's: under scenario.%s)" (join ", " $owners) (first $owners)) (empty $owners))) -}}
{{- end -}}
{{- end -}}
{{- if $errs -}}
{{- fail (join "; " $errs) -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}
