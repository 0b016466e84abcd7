# Build a static binary, then ship it alone on a distroless base as a
# non-root user. The configs are embedded in the binary.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/moenda .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/moenda /moenda
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/moenda"]
CMD ["serve"]
