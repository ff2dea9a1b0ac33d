// Command addsearch is the README example: add a memory, search for it, and read the
// ErrorInfo reason of a refused delete.
//
//	go run ./examples/addsearch -addr 127.0.0.1:50051
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	engramv1 "github.com/engram-memory/engram/clients/go/engram/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "Engram server address")
	flag.Parse()

	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := engramv1.NewMemoryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	added, err := client.AddMemory(ctx, &engramv1.AddMemoryRequest{
		Content:    "The user prefers short answers in British English.",
		Type:       engramv1.MemoryType_MEMORY_TYPE_DIRECTIVE,
		Importance: proto.Int32(8),
		Tags:       []string{"style"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(added.GetOutcome(), added.GetMemory().GetId())

	found, err := client.SearchMemories(ctx, &engramv1.SearchMemoriesRequest{
		Query:  "How should I phrase my replies?",
		Limit:  3,
		Filter: &engramv1.MemoryFilter{TagsAny: []string{"style"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range found.GetResults() {
		fmt.Printf("%.3f %s\n", r.GetScore().GetFinal(), r.GetMemory().GetContent())
	}

	// Directives are protected: deleting one without Force fails with a reason.
	_, err = client.DeleteMemory(ctx, &engramv1.DeleteMemoryRequest{
		Target: &engramv1.DeleteMemoryRequest_Id{Id: added.GetMemory().GetId()},
	})
	if st, ok := status.FromError(err); ok {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				fmt.Println(st.Code(), info.GetReason()) // FailedPrecondition ERROR_REASON_PROTECTED_MEMORY
			}
		}
	}
}
