package main

import (
	"fmt"
	"strings"
)

// A kind's CRD-level settings come from the "+cue-gen:<Kind>:<key>:<value>"
// tags in the leading comment of its message, as Istio's generator reads
// them:
//
//	+cue-gen:VirtualService:groupName:networking.istio.io
//	+cue-gen:VirtualService:versions:v1,v1beta1,v1alpha3      (the first is stored)
//	+cue-gen:VirtualService:subresource:status
//	+cue-gen:VirtualService:resource:categories=istio-io,networking-istio-io,shortNames=vs
//	+cue-gen:VirtualService:printerColumn:name=Hosts,type=string,JSONPath=.spec.hosts,description="..."
//	+cue-gen:ServiceEntry:spec:required
//
// A tag's value continues on the following comment lines up to the next
// tag, a "-->" line or the end of the comment; a key given more than once
// (printerColumn) keeps every value, joined by ";;".

const cueGenTag = "+cue-gen"

// cueGenTags returns the tags of a message comment by key, or nil if it has
// none.
func cueGenTags(comment string) (map[string]string, error) {
	var lines []string
	var cur string
	for _, line := range strings.Split(comment, "\n") {
		line = strings.Trim(line, " ")
		switch {
		case line == "-->":
			lines = append(lines, cur)
			cur = ""
		case strings.HasPrefix(line, cueGenTag):
			lines = append(lines, cur)
			cur = line
		case cur != "" && line != "":
			cur += " " + line
		}
	}
	lines = append(lines, cur)
	tags := map[string]string{}
	for _, line := range lines {
		_, contents, ok := strings.Cut(line, cueGenTag)
		if !ok {
			continue
		}
		parts := strings.SplitN(strings.TrimPrefix(contents, ":"), ":", 3)
		if len(parts) < 2 {
			return nil, fmt.Errorf("invalid tag %q", line)
		}
		val := ""
		if len(parts) > 2 {
			val = parts[2]
		}
		if prev, ok := tags[parts[1]]; ok {
			tags[parts[1]] = prev + ";;" + val
		} else {
			tags[parts[1]] = val
		}
	}
	if len(tags) == 0 {
		return nil, nil
	}
	return tags, nil
}

// keyValues splits "a=b,c=d,e,f=g" into {a: b, c: d,e, f: g}: a value runs
// to the last comma before the next "=", so values may hold commas (not
// "="). Quotes around a value are dropped.
func keyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	parts := strings.Split(s, "=")
	if len(parts) == 1 {
		out[parts[0]] = ""
	}
	if strings.Contains(parts[0], ",") {
		return nil, fmt.Errorf("cannot parse %q as key=value pairs", s)
	}
	key := parts[0]
	for i := 1; i < len(parts); i++ {
		if parts[i] == "" || parts[i] == "," {
			return nil, fmt.Errorf("cannot parse %q as key=value pairs: empty value", s)
		}
		last := i == len(parts)-1
		if !last && !strings.Contains(parts[i], ",") {
			return nil, fmt.Errorf("cannot parse %q as key=value pairs: missing separator", s)
		}
		if last {
			out[key] = strings.Trim(parts[i], "\"'`")
			continue
		}
		cut := strings.LastIndex(parts[i], ",")
		out[key] = strings.Trim(parts[i][:cut], "\"'`")
		key = parts[i][cut+1:]
		if key == "" {
			return nil, fmt.Errorf("cannot parse %q as key=value pairs: missing key", s)
		}
	}
	return out, nil
}
