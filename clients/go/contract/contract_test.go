// Package contract runs the shared engram.v1 contract scenarios (clients/scenarios/*.json)
// against a live Engram server with the generated Go stubs.
//
// The server address comes from ENGRAM_CONTRACT_ADDR; `.venv/bin/pytest tests/polyglot`
// starts a fresh server and runs this test with it. The rules (request mapping, "$name"
// substitution, captures, canonical observations, subset matching) are the same as in the
// Python runner (tests/polyglot/scenario.py) and the TypeScript one (clients/ts/test).
package contract

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	engramv1 "github.com/engram-memory/engram/clients/go/engram/v1"
)

type scenario struct {
	Scenario string `json:"scenario"`
	Steps    []step `json:"steps"`
}

type step struct {
	Name    string `json:"name"`
	Call    string `json:"call"`
	Capture string `json:"capture"`
	Request any    `json:"request"`
	Expect  any    `json:"expect"`
}

type entry struct {
	Step     string `json:"step"`
	Observed any    `json:"observed"`
}

func TestContract(t *testing.T) {
	addr := os.Getenv("ENGRAM_CONTRACT_ADDR")
	if addr == "" {
		t.Skip("ENGRAM_CONTRACT_ADDR is not set; run `.venv/bin/pytest tests/polyglot` from the repository root")
	}
	path := os.Getenv("ENGRAM_CONTRACT_SCENARIO")
	if path == "" {
		path = filepath.Join("..", "..", "scenarios", "contract_v1.json")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := &runner{client: engramv1.NewMemoryServiceClient(conn), captured: map[string]string{}, names: map[string]string{}}

	var transcript []entry
	defer func() {
		if out := os.Getenv("ENGRAM_CONTRACT_TRANSCRIPT"); out != "" {
			data, _ := json.MarshalIndent(transcript, "", "  ")
			if err := os.WriteFile(out, data, 0o644); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, st := range sc.Steps {
		ok := t.Run(st.Name, func(t *testing.T) {
			observed, err := r.step(st)
			if err != nil {
				t.Fatal(err)
			}
			transcript = append(transcript, entry{Step: st.Name, Observed: observed})
			if problems := mismatches(st.Expect, observed, "$"); len(problems) > 0 {
				data, _ := json.Marshal(observed)
				t.Fatalf("%s\nobserved: %s", strings.Join(problems, "\n"), data)
			}
		})
		if !ok {
			break // later steps depend on earlier ones
		}
	}
}

type runner struct {
	client   engramv1.MemoryServiceClient
	captured map[string]string // name -> id
	names    map[string]string // id -> name
}

// step runs one step and returns its canonical observation (plain JSON values).
func (r *runner) step(st step) (any, error) {
	reqJSON, err := json.Marshal(r.substitute(st.Request))
	if err != nil {
		return nil, err
	}
	var req proto.Message
	switch st.Call {
	case "AddMemory":
		req = &engramv1.AddMemoryRequest{}
	case "SearchMemories":
		req = &engramv1.SearchMemoriesRequest{}
	case "UpdateMemory":
		req = &engramv1.UpdateMemoryRequest{}
	case "DeleteMemory":
		req = &engramv1.DeleteMemoryRequest{}
	case "GetMemory":
		req = &engramv1.GetMemoryRequest{}
	case "ListMemories":
		req = &engramv1.ListMemoriesRequest{}
	case "ListCollections":
		req = &engramv1.ListCollectionsRequest{}
	case "DeleteCollection":
		req = &engramv1.DeleteCollectionRequest{}
	case "ExtractMemories":
		req = &engramv1.ExtractMemoriesRequest{}
	case "ListTrash":
		req = &engramv1.ListTrashRequest{}
	case "RestoreMemory":
		req = &engramv1.RestoreMemoryRequest{}
	case "PurgeTrash":
		req = &engramv1.PurgeTrashRequest{}
	case "RestoreCollection":
		req = &engramv1.RestoreCollectionRequest{}
	case "GetContext":
		req = &engramv1.GetContextRequest{}
	case "GetTriggers":
		req = &engramv1.GetTriggersRequest{}
	case "ListSlots":
		req = &engramv1.ListSlotsRequest{}
	case "UpdateSlot":
		req = &engramv1.UpdateSlotRequest{}
	case "RunConsolidation":
		req = &engramv1.RunConsolidationRequest{}
	case "ListTopics":
		req = &engramv1.ListTopicsRequest{}
	case "GetTopic":
		req = &engramv1.GetTopicRequest{}
	case "ExportMemories":
		req = &engramv1.ExportMemoriesRequest{}
	case "ImportMemories":
		req = &engramv1.ImportMemoriesRequest{}
	default:
		return nil, fmt.Errorf("unknown call %q", st.Call)
	}
	if err := protojson.Unmarshal(reqJSON, req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var obs map[string]any
	switch q := req.(type) {
	case *engramv1.AddMemoryRequest:
		resp, err := r.client.AddMemory(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		r.capture(st.Capture, resp.GetMemory())
		near := []any{}
		for _, s := range resp.GetNearDuplicates() {
			near = append(near, r.name(s.GetId()))
		}
		conflicts := []any{}
		for _, c := range resp.GetConflicts() {
			conflicts = append(conflicts, map[string]any{
				"memory":     r.name(c.GetMemoryId()),
				"basis":      c.GetBasis(),
				"superseded": c.GetSuperseded(),
			})
		}
		obs = map[string]any{
			"outcome":         resp.GetOutcome().String(),
			"memory":          r.memory(resp.GetMemory()),
			"near_duplicates": near,
			"replayed":        resp.GetReplayed(),
			"conflicts":       conflicts,
		}
	case *engramv1.SearchMemoriesRequest:
		resp, err := r.client.SearchMemories(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		var ms []*engramv1.Memory
		for _, res := range resp.GetResults() {
			ms = append(ms, res.GetMemory())
		}
		obs = r.ids(ms)
	case *engramv1.UpdateMemoryRequest:
		resp, err := r.client.UpdateMemory(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		r.capture(st.Capture, resp.GetMemory())
		obs = map[string]any{
			"memory":   r.memory(resp.GetMemory()),
			"previous": r.memory(resp.GetPrevious()),
			"changed":  resp.GetChanged(),
			"dry_run":  resp.GetDryRun(),
		}
	case *engramv1.DeleteMemoryRequest:
		resp, err := r.client.DeleteMemory(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{"deleted": r.sortedNames(resp.GetDeleted()), "dry_run": resp.GetDryRun()}
	case *engramv1.GetMemoryRequest:
		resp, err := r.client.GetMemory(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		r.capture(st.Capture, resp.GetMemory())
		history := []any{}
		for _, m := range resp.GetHistory() {
			history = append(history, r.memory(m))
		}
		obs = map[string]any{"memory": r.memory(resp.GetMemory()), "history": history}
	case *engramv1.ListMemoriesRequest:
		resp, err := r.client.ListMemories(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{"id_set": r.sortedNames(resp.GetMemories())}
	case *engramv1.ListCollectionsRequest:
		resp, err := r.client.ListCollections(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		cols := resp.GetCollections()
		sort.Slice(cols, func(i, j int) bool { return cols[i].GetName() < cols[j].GetName() })
		out := []any{}
		for _, c := range cols {
			out = append(out, map[string]any{"name": c.GetName(), "memory_count": c.GetMemoryCount()})
		}
		obs = map[string]any{"collections": out}
	case *engramv1.DeleteCollectionRequest:
		resp, err := r.client.DeleteCollection(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{"deleted_count": resp.GetDeletedCount()}
	case *engramv1.ExtractMemoriesRequest:
		resp, err := r.client.ExtractMemories(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		redactions := []any{}
		for _, k := range resp.GetRedactions() {
			redactions = append(redactions, k)
		}
		memories := []any{}
		for _, x := range resp.GetMemories() { // extracted memories are never captured: no ids
			tags := append([]string{}, x.GetTags()...)
			sort.Strings(tags)
			outcome := ""
			if x.GetResult() != nil {
				outcome = x.GetResult().GetOutcome().String()
			}
			memories = append(memories, map[string]any{
				"content":    x.GetContent(),
				"type":       x.GetType().String(),
				"importance": x.GetImportance(),
				"tags":       tags,
				"outcome":    outcome,
			})
		}
		obs = map[string]any{
			"extractor":    resp.GetExtractor().String(),
			"deduplicated": resp.GetDeduplicated(),
			"dry_run":      resp.GetDryRun(),
			"redactions":   redactions,
			"memories":     memories,
		}
	case *engramv1.ListTrashRequest:
		resp, err := r.client.ListTrash(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{"id_set": r.sortedNames(resp.GetMemories())}
	case *engramv1.RestoreMemoryRequest:
		resp, err := r.client.RestoreMemory(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		near := []any{}
		for _, s := range resp.GetNearDuplicates() {
			near = append(near, r.name(s.GetId()))
		}
		obs = map[string]any{"memory": r.memory(resp.GetMemory()), "near_duplicates": near}
	case *engramv1.PurgeTrashRequest:
		resp, err := r.client.PurgeTrash(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{"purged_count": resp.GetPurgedCount()}
	case *engramv1.RestoreCollectionRequest:
		resp, err := r.client.RestoreCollection(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		c := resp.GetCollection()
		obs = map[string]any{"name": c.GetName(), "memory_count": c.GetMemoryCount()}
	case *engramv1.GetContextRequest:
		resp, err := r.client.GetContext(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		// The Markdown holds dates: its parts are compared instead.
		sections := []any{}
		for _, x := range resp.GetSections() {
			ids, slots, triggers := []any{}, []any{}, []any{}
			for _, i := range x.GetItems() {
				if i.GetMemory().GetId() != "" {
					ids = append(ids, r.name(i.GetMemory().GetId()))
				}
				if i.GetSlot() != "" {
					slots = append(slots, i.GetSlot())
				}
				if i.GetTrigger() != "" {
					triggers = append(triggers, i.GetTrigger())
				}
			}
			sections = append(sections, map[string]any{
				"kind": x.GetKind().String(), "ids": ids, "slots": slots, "triggers": triggers,
			})
		}
		obs = map[string]any{
			"sections":        sections,
			"token_budget":    resp.GetTokenBudget(),
			"within_budget":   resp.GetTokensUsed() > 0 && resp.GetTokensUsed() <= resp.GetTokenBudget(),
			"tokenizer":       resp.GetTokenizer(),
			"since_source":    resp.GetSinceSource().String(),
			"last_session_id": resp.GetLastSessionId(),
		}
	case *engramv1.GetTriggersRequest:
		resp, err := r.client.GetTriggers(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		ids := []any{}
		for _, m := range resp.GetMemories() {
			ids = append(ids, r.name(m.GetId()))
		}
		matched := []any{}
		for _, m := range resp.GetMatched() {
			matched = append(matched, m)
		}
		obs = map[string]any{"action": resp.GetAction(), "matched": matched, "ids": ids}
	case *engramv1.ListSlotsRequest:
		resp, err := r.client.ListSlots(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		slots := []any{}
		for _, x := range resp.GetSlots() {
			slots = append(slots, map[string]any{"name": x.GetName(), "content": x.GetContent()})
		}
		obs = map[string]any{"slots": slots}
	case *engramv1.UpdateSlotRequest:
		resp, err := r.client.UpdateSlot(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{
			"slot":       map[string]any{"name": resp.GetSlot().GetName(), "content": resp.GetSlot().GetContent()},
			"compaction": resp.GetCompaction().String(),
		}
	case *engramv1.RunConsolidationRequest:
		resp, err := r.client.RunConsolidation(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		clusters := []any{}
		for _, c := range resp.GetClusters() {
			sources := []string{}
			for _, id := range c.GetSourceIds() {
				sources = append(sources, r.name(id))
			}
			sort.Strings(sources)
			clusters = append(clusters, map[string]any{"sources": sources, "merged_by": c.GetMergedBy()})
		}
		obs = map[string]any{
			"outcome":         resp.GetOutcome().String(),
			"memories_before": resp.GetMemoriesBefore(),
			"memories_after":  resp.GetMemoriesAfter(),
			"clusters":        clusters,
		}
	case *engramv1.ListTopicsRequest:
		resp, err := r.client.ListTopics(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		sum := int32(0)
		first := ""
		for i, t := range resp.GetTopics() {
			sum += t.GetSize()
			if i == 0 {
				// topic ids are minted by the server: the first (largest) one is captured by name
				if st.Capture != "" {
					r.captured[st.Capture] = t.GetId()
					r.names[t.GetId()] = st.Capture
				}
				first = r.name(t.GetId())
			}
		}
		obs = map[string]any{
			"memory_count": resp.GetMemoryCount(),
			"topic_count":  resp.GetTopicCount(),
			"size_sum":     sum,
			"first":        first,
		}
	case *engramv1.GetTopicRequest:
		resp, err := r.client.GetTopic(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		obs = map[string]any{
			"topic": map[string]any{"id": r.name(resp.GetTopic().GetId()), "size": resp.GetTopic().GetSize()},
			"all_on_page": int32(len(resp.GetMemories())) == resp.GetTopic().GetSize() &&
				resp.GetNextPageToken() == "",
		}
	case *engramv1.ExportMemoriesRequest: // server-streaming: the file is the chunks' data in order
		stream, err := r.client.ExportMemories(ctx, q)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		var data []byte
		var last *engramv1.ExportMemoriesResponse
		for {
			chunk, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return normalize(r.rpcError(err))
			}
			data = append(data, chunk.GetData()...)
			last = chunk
		}
		if last == nil {
			return nil, fmt.Errorf("export without a chunk")
		}
		if st.Capture != "" { // the file, as proto3 JSON writes bytes: base64
			r.captured[st.Capture] = base64.StdEncoding.EncodeToString(data)
		}
		lines := 0
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) > 0 {
				lines++
			}
		}
		obs = map[string]any{
			"memories_done":  last.GetMemoriesDone(),
			"memories_total": last.GetMemoriesTotal(),
			"lines":          lines,
		}
	case *engramv1.ImportMemoriesRequest: // client-streaming, sent as one message
		stream, err := r.client.ImportMemories(ctx)
		if err != nil {
			return normalize(r.rpcError(err))
		}
		if err := stream.Send(q); err != nil && err != io.EOF {
			return normalize(r.rpcError(err))
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			return normalize(r.rpcError(err))
		}
		collections := append([]string{}, resp.GetCollections()...)
		sort.Strings(collections)
		obs = map[string]any{
			"lines":       resp.GetLines(),
			"created":     resp.GetCreated(),
			"replaced":    resp.GetReplaced(),
			"unchanged":   resp.GetUnchanged(),
			"duplicates":  resp.GetDuplicates(),
			"collections": collections,
		}
	}
	return normalize(obs)
}

// rpcError reads the google.rpc.Status carried in the grpc-status-details-bin trailer:
// its ErrorInfo (reason, domain, metadata) and BadRequest (field violations).
func (r *runner) rpcError(err error) map[string]any {
	st, ok := status.FromError(err)
	if !ok {
		return map[string]any{"error": map[string]any{"code": "NOT_A_GRPC_STATUS", "message": err.Error()}}
	}
	out := map[string]any{
		"code":             code.Code_name[int32(st.Code())],
		"reason":           "",
		"domain":           "",
		"metadata":         map[string]any{},
		"field_violations": []any{},
	}
	for _, d := range st.Details() {
		switch detail := d.(type) {
		case *errdetails.ErrorInfo:
			out["reason"] = detail.GetReason()
			out["domain"] = detail.GetDomain()
			md := map[string]any{}
			for k, v := range detail.GetMetadata() {
				if name, ok := r.names[v]; ok {
					v = name
				}
				md[k] = v
			}
			out["metadata"] = md
		case *errdetails.BadRequest:
			seen := map[string]bool{}
			fields := []string{}
			for _, v := range detail.GetFieldViolations() {
				if !seen[v.GetField()] {
					seen[v.GetField()] = true
					fields = append(fields, v.GetField())
				}
			}
			sort.Strings(fields)
			fv := []any{}
			for _, f := range fields {
				fv = append(fv, f)
			}
			out["field_violations"] = fv
		case error:
			out["detail_error"] = detail.Error()
		}
	}
	return map[string]any{"error": out}
}

func (r *runner) capture(name string, m *engramv1.Memory) {
	if name != "" {
		r.captured[name] = m.GetId()
		r.names[m.GetId()] = name
	}
}

func (r *runner) name(id string) string {
	if id == "" {
		return ""
	}
	if name, ok := r.names[id]; ok {
		return name
	}
	return "?"
}

func (r *runner) memory(m *engramv1.Memory) map[string]any {
	tags := append([]string{}, m.GetTags()...)
	sort.Strings(tags)
	return map[string]any{
		"id":            r.name(m.GetId()),
		"collection":    m.GetCollection(),
		"type":          m.GetType().String(),
		"content":       m.GetContent(),
		"importance":    m.GetImportance(),
		"tags":          tags,
		"version":       m.GetVersion(),
		"source":        m.GetSource().String(),
		"source_type":   m.GetSourceType().String(),
		"superseded_by": r.name(m.GetSupersededBy()),
	}
}

func (r *runner) ids(ms []*engramv1.Memory) map[string]any {
	names := []string{}
	for _, m := range ms {
		names = append(names, r.name(m.GetId()))
	}
	top := ""
	if len(names) > 0 {
		top = names[0]
	}
	set := append([]string{}, names...)
	sort.Strings(set)
	return map[string]any{"ids": names, "id_set": set, "top": top}
}

func (r *runner) sortedNames(ms []*engramv1.Memory) []string {
	names := []string{}
	for _, m := range ms {
		names = append(names, r.name(m.GetId()))
	}
	sort.Strings(names)
	return names
}

// substitute replaces every "$name" string by the id captured under that name.
func (r *runner) substitute(v any) any {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$") {
			if id, ok := r.captured[x[1:]]; ok {
				return id
			}
			panic(fmt.Sprintf("%s was never captured", x))
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.substitute(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = r.substitute(e)
		}
		return out
	default:
		return v
	}
}

// normalize turns an observation into plain JSON values (numbers as float64), the form
// the expectations are decoded into.
func normalize(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(data, &out)
	return out, err
}

// mismatches lists where expected is not a subset of observed (the shared matching rule).
func mismatches(expected, observed any, path string) []string {
	show := func(v any) string { data, _ := json.Marshal(v); return string(data) }
	switch e := expected.(type) {
	case map[string]any:
		o, ok := observed.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: expected an object, got %s", path, show(observed))}
		}
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			ov, present := o[k]
			if !present {
				out = append(out, fmt.Sprintf("%s.%s: missing", path, k))
				continue
			}
			out = append(out, mismatches(e[k], ov, path+"."+k)...)
		}
		return out
	case []any:
		o, ok := observed.([]any)
		if !ok || len(o) != len(e) {
			return []string{fmt.Sprintf("%s: expected %s, got %s", path, show(expected), show(observed))}
		}
		var out []string
		for i := range e {
			out = append(out, mismatches(e[i], o[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if expected != observed {
			return []string{fmt.Sprintf("%s: expected %s, got %s", path, show(expected), show(observed))}
		}
		return nil
	}
}
